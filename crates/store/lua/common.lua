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

-- State values (docs/redis.md, "Values"). Every state but the sliding log is ONE Redis string:
-- GCRA and the fixed window pack their two numbers into one decimal integer a x m + b
-- (0 <= b < m), which Redis stores inside the key's object header (encoding "int": a 14-byte
-- name then costs 56 bytes in all); the other states are decimal numbers joined by ':'.
local DEC = 1000000000 -- 10^9
local PACK_MAX = 8388608 -- 2^23: the largest m pack2 takes (keeps every step below 2^53)
local EXACT = 9007199254740992 -- 2^53: below it every integer is an exact double

-- a x m + b exactly (a number below 2^53, else its decimal text), or nil when it cannot be
-- packed (m > 2^23, or b outside 0 <= b < m). 0 <= a < 2^52. a x m may exceed 2^53, so it is formed in base 10^9:
-- a = ah x 10^9 + al; x = al x m + b < 10^9 x 2^23 + 2^23 < 2^53; the high part
-- ah x m + floor(x / 10^9) < 2^22 x 2^23 stays exact too. Up to 2^63 - 1 Redis keeps the
-- result as an integer; above (a rare large m), it is an ordinary string, read back alike.
local function pack2(a, m, b)
  if m > PACK_MAX or b < 0 or b >= m then
    return nil
  end
  local v = a * m + b
  if v < EXACT then
    -- exact (a rounded product would be >= 2^53): Redis writes an integral number as its
    -- exact decimal digits, and this path formats nothing in Lua
    return v
  end
  local ah = fdiv(a, DEC)
  local x = (a - ah * DEC) * m + b
  local carry = fdiv(x, DEC)
  local high = ah * m + carry
  local low = x - carry * DEC
  if high == 0 then
    return string.format('%d', low)
  end
  return string.format('%d%09d', high, low)
end

-- (a, b) from pack2's text v for the same m: the last 9 digits and the rest, then a long
-- division by m in base 10^9 (every step below 2^53 since m <= 2^23).
local function unpack2(v, m)
  local x = tonumber(v)
  if x < EXACT then
    -- strtod is exact for an integer below 2^53
    local q = fdiv(x, m)
    return q, x - q * m
  end
  local n = #v
  local hi, lo = 0, tonumber(v)
  if n > 9 then
    hi = tonumber(string.sub(v, 1, n - 9))
    lo = tonumber(string.sub(v, n - 8))
  end
  local qh = fdiv(hi, m)
  local x = (hi - qh * m) * DEC + lo
  local q = fdiv(x, m)
  return qh * DEC + q, x - q * m
end

-- The two numbers of a '<a>:<b>' value, or nil when v holds no ':' (a packed integer).
local function split2(v)
  local colon = string.find(v, ':', 1, true)
  if not colon then
    return nil
  end
  return tonumber(string.sub(v, 1, colon - 1)), tonumber(string.sub(v, colon + 1))
end

-- A bucket value's base and the scheduled time of its latest reservation for later, stored as
-- the suffix ';<last_scheduled_at - since>' only while it lies after `since` (the state's last
-- update: docs/spec/reservations.md, "Settle never mints capacity"). Returns the base text and
-- the offset (0 without the suffix).
local function split_scheduled(v)
  local semi = string.find(v, ';', 1, true)
  if not semi then
    return v, 0
  end
  return string.sub(v, 1, semi - 1), tonumber(string.sub(v, semi + 1))
end

-- A two-number bucket value `<a>:<b>[;<offset>]` (`b` its last update): a, b and the scheduled
-- time of its latest reservation for later (0 when none lies after `b`).
local function split2_scheduled(v)
  local base, offset = split_scheduled(v)
  local a, b = split2(base)
  if offset > 0 then
    return a, b, b + offset
  end
  return a, b, 0
end

-- The suffix for a state whose latest reservation for later is at `at`, updated at `since`.
local function scheduled_suffix(at, since)
  if at > since then
    return string.format(';%d', at - since)
  end
  return ''
end

-- The scheduled time of the latest reservation for later, after one at now + wait (kept as it
-- was for a reservation at once: now bounds its time anyway).
local function latest_scheduled(previous, now, wait)
  if wait > 0 then
    return max(previous, now + wait)
  end
  return previous
end

-- What a bucket gives back (ticks its level falls) when a reservation of `reserved` units
-- scheduled at `at` is settled with `actual <= reserved` at `now`: what it still occupies,
-- never what an admission scheduled up to `latest` (the later of now and the latest
-- reservation for later) stands on.
--   min((reserved - actual) x T, max(reserved x T - min(latest - at, horizon + 1) x den, 0))
local function settle_give_back(interval, den, horizon, latest, at, reserved, actual)
  local elapsed = min(max(latest - at, 0), horizon + 1)
  return min((reserved - actual) * interval, max(reserved * interval - elapsed * den, 0))
end

-- Writes value v with a TTL of `ttl` ms, or keeping the key's TTL when ttl is nil (refunds:
-- a refunded state is never older than its TTL). One command either way.
local function save_value(key, v, ttl)
  if ttl then
    redis.call('SET', key, v, 'PX', ttl)
  else
    redis.call('SET', key, v, 'KEEPTTL')
  end
end
