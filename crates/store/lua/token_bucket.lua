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
    return { tokens = p.burst * p.num, last_refill = 0, last_scheduled_at = 0, exists = false }
  end
  local tokens, last_refill, at = split2_scheduled(v)
  return { tokens = tokens, last_refill = last_refill, last_scheduled_at = at, exists = true }
end

function token_bucket.save(key, s, ttl)
  save_value(key, string.format('%d:%d', s.tokens, s.last_refill)
    .. scheduled_suffix(s.last_scheduled_at, s.last_refill), ttl)
end

-- The time an empty bucket fills: also the longest reservation wait.
function token_bucket.max_wait(p)
  return cdiv(p.burst * p.num, p.den)
end

-- Tokens (ticks, negative in debt) at `now >= last_refill`: elapsed time is capped at twice the
-- fill time (the most a bucket in debt takes) BEFORE it is multiplied.
local function tokens_at(s, p, now)
  local capacity = p.burst * p.num
  local elapsed = min(now - s.last_refill, 2 * token_bucket.max_wait(p))
  return min(s.tokens + elapsed * p.den, capacity)
end

function token_bucket.decide(s, p, now, cost, consume)
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  -- backwards time: no refill
  now = max(now, s.last_refill)
  local tokens = tokens_at(s, p, now)
  local needed = cost * interval
  -- cost 0 is a peek, allowed even while reservations hold the bucket in debt
  local allowed = (cost == 0) or tokens >= needed
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
  return allowed, fdiv(max(tokens_after, 0), interval), cdiv(capacity - tokens_after, den),
    retry_after, 0
end

-- Reserves `cost` units for now + wait, into debt: the tokens an admission then leaves, seen
-- from now. Returns false when they do not fit then, else true, remaining, reset_after and the
-- effective now.
function token_bucket.reserve_at(s, p, now, cost, wait)
  if wait > token_bucket.max_wait(p) then
    return false
  end
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  now = max(now, s.last_refill)
  local tokens = tokens_at(s, p, now)
  if cost > 0 then
    local shift = wait * den
    local level = max(capacity - tokens, shift) + cost * interval
    if level - shift > capacity then
      return false
    end
    tokens = capacity - level
    s.tokens = tokens
    s.last_refill = now
    s.last_scheduled_at = latest_scheduled(s.last_scheduled_at, now, wait)
  end
  return true, fdiv(max(tokens, 0), interval), cdiv(capacity - tokens, den), now
end

-- Settles: back what the reservation still holds (not above capacity) or charged (down to
-- -(fill time x den)).
function token_bucket.settle(s, p, now, at, reserved, actual)
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  now = max(now, s.last_refill)
  local tokens = tokens_at(s, p, now)
  if actual <= reserved then
    local latest = max(now, s.last_scheduled_at)
    tokens = min(tokens + settle_give_back(interval, den, token_bucket.max_wait(p), latest, at,
      reserved, actual), capacity)
  else
    local most = 2 * capacity + den
    local charge = min(min(actual - reserved, cdiv(most, interval)) * interval, most)
    tokens = max(tokens - charge, -(token_bucket.max_wait(p) * den))
  end
  s.tokens = tokens
  s.last_refill = now
  if s.last_scheduled_at <= now then
    s.last_scheduled_at = 0
  end
  return fdiv(max(tokens, 0), interval), cdiv(capacity - tokens, den)
end

function token_bucket.refund(s, p, now, cost, mark)
  now = max(now, s.last_refill)
  s.tokens = min(tokens_at(s, p, now) + cost * p.num, p.burst * p.num)
  s.last_refill = now
  return true
end
