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
    return { level = 0, last_leak = 0, last_scheduled_at = 0, exists = false }
  end
  local level, last_leak, at = split2_scheduled(v)
  return { level = level, last_leak = last_leak, last_scheduled_at = at, exists = true }
end

function leaky_bucket.save(key, s, ttl)
  save_value(key, string.format('%d:%d', s.level, s.last_leak)
    .. scheduled_suffix(s.last_scheduled_at, s.last_leak), ttl)
end

-- The time a full bucket drains: also the longest reservation wait.
function leaky_bucket.max_wait(p)
  return cdiv(p.burst * p.num, p.den)
end

-- Level (ticks) at `now >= last_leak`; elapsed is capped at twice the drain time (the most a
-- level in debt takes) before multiplying.
local function level_at(s, p, now)
  local elapsed = min(now - s.last_leak, 2 * leaky_bucket.max_wait(p))
  return max(s.level - elapsed * p.den, 0)
end

function leaky_bucket.decide(s, p, now, cost, consume)
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  -- backwards time: nothing drains
  now = max(now, s.last_leak)
  local level = level_at(s, p, now)
  local new = level + cost * interval
  -- cost 0 is a peek, allowed even while reservations hold the level above capacity
  local allowed = (cost == 0) or new <= capacity
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
  return allowed, fdiv(max(capacity - level_after, 0), interval), cdiv(level_after, den),
    retry_after, 0
end

-- Reserves `cost` units for now + wait: the level an admission then leaves, seen from now.
-- Returns false when they do not fit then, else true, remaining, reset_after, effective now.
function leaky_bucket.reserve_at(s, p, now, cost, wait)
  if wait > leaky_bucket.max_wait(p) then
    return false
  end
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  now = max(now, s.last_leak)
  local level = level_at(s, p, now)
  if cost > 0 then
    local shift = wait * den
    local new = max(level, shift) + cost * interval
    if new - shift > capacity then
      return false
    end
    s.level = new
    s.last_leak = now
    s.last_scheduled_at = latest_scheduled(s.last_scheduled_at, now, wait)
    level = new
  end
  return true, fdiv(max(capacity - level, 0), interval), cdiv(level, den), now
end

-- Settles: the level down by what the reservation still holds (not below 0) or up (to
-- capacity + drain x den).
function leaky_bucket.settle(s, p, now, at, reserved, actual)
  local interval, den = p.num, p.den
  local capacity = p.burst * interval
  local most = capacity + leaky_bucket.max_wait(p) * den
  now = max(now, s.last_leak)
  local level = level_at(s, p, now)
  if actual <= reserved then
    local latest = max(now, s.last_scheduled_at)
    level = max(level - settle_give_back(interval, den, leaky_bucket.max_wait(p), latest, at,
      reserved, actual), 0)
  else
    level = min(level + min(actual - reserved, cdiv(most, interval)) * interval, most)
  end
  s.level = level
  s.last_leak = now
  if s.last_scheduled_at <= now then
    s.last_scheduled_at = 0
  end
  return fdiv(max(capacity - level, 0), interval), cdiv(level, den)
end

function leaky_bucket.refund(s, p, now, cost, mark)
  now = max(now, s.last_leak)
  s.level = max(level_at(s, p, now) - cost * p.num, 0)
  s.last_leak = now
  return true
end
