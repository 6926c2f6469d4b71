-- common.lua: integer helpers shared by every Floodgate script (docs/spec/README.md, "Notes for
-- Lua (Redis) implementations"). Prepended to each assembled script; defines no KEYS or ARGV.
--
-- Lua 5.1 numbers are doubles. Every value the specs compute stays below 2^53, so + - * are
-- exact; division is the only operation that can round, and only through these helpers.

-- floor(a / b) for integers 0 <= a, 1 <= b, a + b < 2^53. The double quotient is correctly
-- rounded: it is never below the true floor, and at most one above it (when a / b lies just
-- under an integer), so one correction makes it exact.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  end
  return q
end

-- ceil(a / b) = floor((a + b - 1) / b); every call site keeps a + b - 1 < 2^53.
local function cdiv(a, b)
  return fdiv(a + b - 1, b)
end

-- a mod b (0 <= result < b) without Lua's `%`, which rounds for large operands.
local function fmod(a, b)
  return a - fdiv(a, b) * b
end

local function max(a, b)
  if a > b then return a end
  return b
end

local function min(a, b)
  if a < b then return a end
  return b
end

-- The server clock in microseconds since the Unix epoch (docs/spec/README.md, "Time"):
-- seconds x 1_000_000 + microseconds, exact (about 1.7 x 10^15 < 2^53).
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The TTL in milliseconds for a state whose reset_after is `reset_after_us`:
-- ceil(reset_after / 1000), at least 1, plus the configured extra milliseconds.
local function ttl_ms(reset_after_us, extra_ms)
  return max(cdiv(reset_after_us, 1000), 1) + extra_ms
end

-- Hash-backed states (every algorithm but the sliding log): the fields given, as numbers, or
-- nil for a missing key. `exists` tells a stored state from a fresh one.
local function hash_load(key, f1, f2, f3)
  local v
  if f3 then
    v = redis.call('HMGET', key, f1, f2, f3)
  else
    v = redis.call('HMGET', key, f1, f2)
  end
  return tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
end
