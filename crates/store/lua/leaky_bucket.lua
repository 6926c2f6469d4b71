-- leaky_bucket.lua: the leaky bucket as a meter, in ticks, docs/spec/leaky_bucket.md
-- ("Decision", "Writes and TTL"). A library file (no KEYS/ARGV of its own).
--
-- State: level (ticks) and last_leak (us), stored as the string '<level>:<last_leak>'; a
-- missing key is an empty bucket (0, 0).
-- p = {limit, period, burst, num, den}: one unit is `num` ticks, one microsecond drains `den`
-- ticks, capacity = burst x num <= 2^51.
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (unused, 0).
-- refund(s, p, now, cost, mark): takes `cost` units out of the bucket again (not below 0).

local leaky_bucket = {}

function leaky_bucket.load(key, p)
  local v = redis.call('GET', key)
  if not v then
    return { level = 0, last_leak = 0, exists = false }
  end
  local level, last_leak = split2(v)
  return { level = level, last_leak = last_leak, exists = true }
end

function leaky_bucket.save(key, s, ttl)
  save_value(key, string.format('%d:%d', s.level, s.last_leak), ttl)
end

-- Level (ticks) at `now >= last_leak`; elapsed is capped at the drain time before multiplying.
local function level_at(s, p, now)
  local elapsed = min(now - s.last_leak, cdiv(p.burst * p.num, p.den))
  return max(s.level - elapsed * p.den, 0)
end

function leaky_bucket.decide(s, p, now, cost, consume)
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  -- backwards time: nothing drains
  now = max(now, s.last_leak)
  local level = level_at(s, p, now)
  local new = level + cost * interval -- <= 2 x capacity
  local allowed = new <= capacity
  local level_after = level
  if allowed and consume then
    s.level = new
    s.last_leak = now
    level_after = new
  end
  local retry_after = -1
  if not allowed then
    retry_after = cdiv(new - capacity, den)
  end
  return allowed, fdiv(capacity - level_after, interval), cdiv(level_after, den), retry_after, 0
end

function leaky_bucket.refund(s, p, now, cost, mark)
  now = max(now, s.last_leak)
  s.level = max(level_at(s, p, now) - cost * p.num, 0)
  s.last_leak = now
  return true
end
