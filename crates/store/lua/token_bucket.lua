-- token_bucket.lua: the token bucket in ticks, docs/spec/token_bucket.md ("Decision", "Writes
-- and TTL"). A library file (no KEYS/ARGV of its own).
--
-- State: tokens (ticks) and last_refill (us), stored as the string '<tokens>:<last_refill>'
-- (two numbers: both decide, see docs/redis.md "Values"); a missing key is a full bucket
-- (capacity, 0). p = {limit, period, burst, num, den}: one token is `num` ticks, one
-- microsecond refills `den` ticks, capacity = burst x num <= 2^51.
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (unused, 0).
-- refund(s, p, now, cost, mark): puts `cost` tokens back (capped at the capacity).

local token_bucket = {}

function token_bucket.load(key, p)
  local v = redis.call('GET', key)
  if not v then
    return { tokens = p.burst * p.num, last_refill = 0, exists = false }
  end
  local tokens, last_refill = split2(v)
  return { tokens = tokens, last_refill = last_refill, exists = true }
end

function token_bucket.save(key, s, ttl)
  save_value(key, string.format('%d:%d', s.tokens, s.last_refill), ttl)
end

-- Tokens (ticks) at `now >= last_refill`: elapsed time is capped at the fill time BEFORE it is
-- multiplied, so the sum stays below 2 x capacity + den <= 3 x 2^51.
local function tokens_at(s, p, now)
  local capacity = p.burst * p.num
  local elapsed = min(now - s.last_refill, cdiv(capacity, p.den))
  return min(s.tokens + elapsed * p.den, capacity)
end

function token_bucket.decide(s, p, now, cost, consume)
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  -- backwards time: no refill
  now = max(now, s.last_refill)
  local tokens = tokens_at(s, p, now)
  local needed = cost * interval
  local allowed = tokens >= needed
  local tokens_after = tokens
  if allowed and consume then
    s.tokens = tokens - needed
    s.last_refill = now
    tokens_after = tokens - needed
  end
  local retry_after = -1
  if not allowed then
    retry_after = cdiv(needed - tokens, den)
  end
  return allowed, fdiv(tokens_after, interval), cdiv(capacity - tokens_after, den), retry_after, 0
end

function token_bucket.refund(s, p, now, cost, mark)
  now = max(now, s.last_refill)
  s.tokens = min(tokens_at(s, p, now) + cost * p.num, p.burst * p.num)
  s.last_refill = now
  return true
end
