-- sliding_window.lua: the sliding window counter, docs/spec/sliding_window.md ("Estimate and
-- admission", "Decision", "Exact retry_after"). A library file (no KEYS/ARGV of its own).
--
-- State: window_start, count, previous_count, stored as the string
-- '<window_start>:<count>:<previous_count>'; a missing key is (0, 0, 0).
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (the window written). Every product is <= limit x period <= 2^51 (Quota + new()).
-- refund(s, p, now, cost, mark): gives back `cost` units consumed in window `mark`.

local sliding_window = {}

function sliding_window.load(key)
  local v = redis.call('GET', key)
  if not v then
    return { window_start = 0, count = 0, previous_count = 0, exists = false }
  end
  local window_start, count, previous = string.match(v, '^(%d+):(%d+):(%d+)$')
  return {
    window_start = tonumber(window_start),
    count = tonumber(count),
    previous_count = tonumber(previous),
    exists = true,
  }
end

function sliding_window.save(key, s, ttl)
  save_value(key, string.format('%d:%d:%d', s.window_start, s.count, s.previous_count), ttl)
end

function sliding_window.decide(s, p, now, cost, consume)
  local limit, period = p.limit, p.period
  now = max(now, s.window_start)
  local elapsed = fmod(now, period)
  local window = now - elapsed
  local previous, count = 0, 0
  local d = window - s.window_start
  if d == 0 then
    previous, count = s.previous_count, s.count
  elseif d == period then
    previous, count = s.count, 0
  end
  local overlap = period - 1 - elapsed
  local weight = previous * overlap
  local room = limit - count - cost -- may be negative
  local allowed = (cost == 0) or (room >= 0 and weight <= room * period)
  local count_after = count
  if allowed and consume and cost > 0 then
    s.window_start = window
    s.count = count + cost
    s.previous_count = previous
    count_after = count + cost
  end
  local remaining = max(max(limit - count_after, 0) - cdiv(weight, period), 0)
  local reset_after = 0
  if count_after > 0 then
    reset_after = period + overlap
  elseif previous > 0 then
    reset_after = overlap
  end
  local retry_after = -1
  if not allowed then
    if room >= 0 then
      -- later in this window (previous > 0 here, else it was allowed)
      retry_after = overlap - fdiv(room * period, previous)
    else
      -- in the next window (count >= 1 here, since count + cost > limit >= cost)
      local first = max(period - 1 - fdiv((limit - cost) * period, count), 0)
      retry_after = period - elapsed + first
    end
  end
  return allowed, remaining, reset_after, retry_after, window
end

-- The longest reservation wait: one period (in practice the rest of this window).
function sliding_window.max_wait(p)
  return p.period
end

-- (elapsed, window, previous, count) at now >= window_start.
local function window_at(s, p, now)
  local elapsed = fmod(now, p.period)
  local window = now - elapsed
  local previous, count = 0, 0
  local d = window - s.window_start
  if d == 0 then
    previous, count = s.previous_count, s.count
  elseif d == p.period then
    previous, count = s.count, 0
  end
  return elapsed, window, previous, count
end

-- Reserves `cost` units for now + wait, later in this window (the state has no count for the
-- next one). Returns false when they do not fit then, else true, remaining, reset_after and
-- the effective now.
function sliding_window.reserve_at(s, p, now, cost, wait)
  local limit, period = p.limit, p.period
  if wait > period then
    return false
  end
  now = max(now, s.window_start)
  local elapsed, window, previous, count = window_at(s, p, now)
  if cost > 0 then
    if wait >= period - elapsed then
      return false
    end
    local overlap = period - 1 - (elapsed + wait)
    local room = limit - count - cost
    if room < 0 or previous * overlap > room * period then
      return false
    end
    s.window_start = window
    s.count = count + cost
    s.previous_count = previous
  end
  local _, remaining, reset_after = sliding_window.decide(s, p, now, 0, false)
  return true, remaining, reset_after, now
end

-- Settles: back to the reservation's window (or, rolled once, its previous count), or charged
-- to this window up to 2 x limit.
function sliding_window.settle(s, p, now, at, reserved, actual)
  local limit, period = p.limit, p.period
  now = max(now, s.window_start)
  local _, window, previous, count = window_at(s, p, now)
  local reserved_window = at - fmod(at, period)
  if actual <= reserved then
    local back = reserved - actual
    if reserved_window == window then
      count = count - min(back, count)
    elseif reserved_window + period == window then
      previous = previous - min(back, previous)
    end
  else
    count = min(count + (actual - reserved), 2 * limit)
  end
  s.window_start = window
  s.count = count
  s.previous_count = previous
  local _, remaining, reset_after = sliding_window.decide(s, p, now, 0, false)
  return remaining, reset_after
end

function sliding_window.refund(s, p, now, cost, mark)
  if s.window_start == mark then
    s.count = max(s.count - cost, 0)
  elseif s.window_start == mark + p.period then
    -- the window rolled once since: our units are the previous window's count now
    s.previous_count = max(s.previous_count - cost, 0)
  else
    return false
  end
  return true
end
