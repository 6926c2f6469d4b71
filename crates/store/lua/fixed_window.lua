-- fixed_window.lua: the fixed window counter, docs/spec/fixed_window.md ("Decision", "Writes
-- and TTL"). A library file: it reads no KEYS/ARGV itself; batch.lua and refund.lua call it.
--
-- State: window_start (us, a multiple of period) and count (units, <= limit), stored as ONE
-- integer (window_start / period) x (limit + 1) + count (pack2); when that cannot be packed
-- (limit >= 2^23) as the string '<window_start>:<count>'. A missing key is (0, 0).
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (the window written, for refunds). p = {limit, period, burst, num, den}.
-- refund(s, p, now, cost, mark): gives back `cost` units consumed in window `mark`.

local fixed_window = {}

function fixed_window.load(key, p)
  local s = { window_start = 0, count = 0, period = p.period, m = p.limit + 1, exists = false }
  local v = redis.call('GET', key)
  if v then
    local window_start, count = split2(v)
    if not window_start then
      local index
      index, count = unpack2(v, s.m)
      window_start = index * s.period
    end
    s.window_start, s.count, s.exists = window_start, count, true
  end
  return s
end

function fixed_window.save(key, s, ttl)
  local index = fdiv(s.window_start, s.period)
  local v
  if index * s.period == s.window_start then
    v = pack2(index, s.m, s.count)
  end
  save_value(key, v or string.format('%d:%d', s.window_start, s.count), ttl)
end

-- The window `now` (>= window_start) lies in, its count (a count above the limit is what the
-- state's window carried into the next one) and the microseconds to its end.
local function window_at(s, p, now)
  local elapsed = fmod(now, p.period)
  local window = now - elapsed
  local count = 0
  if window == s.window_start then
    count = s.count
  elseif window == s.window_start + p.period then
    count = max(s.count - p.limit, 0)
  end
  return window, count, p.period - elapsed
end

local function reset_of(p, count, to_edge)
  if count > p.limit then
    return to_edge + p.period
  elseif count > 0 then
    return to_edge
  end
  return 0
end

function fixed_window.decide(s, p, now, cost, consume)
  local limit, period = p.limit, p.period
  -- backwards time: never reopen an older window
  now = max(now, s.window_start)
  local window, count, to_edge = window_at(s, p, now)
  local allowed = cost <= max(limit - count, 0)
  local count_after = count
  if allowed and consume and cost > 0 then
    s.window_start = window
    s.count = count + cost
    count_after = s.count
  end
  local retry_after = -1
  if not allowed then
    -- the next window holds what this one carried over; the one after is empty
    if max(count - limit, 0) + cost <= limit then
      retry_after = to_edge
    else
      retry_after = to_edge + period
    end
  end
  return allowed, max(limit - count_after, 0), reset_of(p, count_after, to_edge), retry_after,
    window
end

-- The longest reservation wait: one period (the next window).
function fixed_window.max_wait(p)
  return p.period
end

-- Reserves `cost` units for now + wait: in this window, or counted in the next one (closing
-- this one). Returns false when they do not fit then, else true, remaining, reset_after and
-- the effective now.
function fixed_window.reserve_at(s, p, now, cost, wait)
  local limit, period = p.limit, p.period
  if wait > period then
    return false
  end
  now = max(now, s.window_start)
  local window, count, to_edge = window_at(s, p, now)
  if cost > 0 then
    if wait < to_edge then
      if cost > max(limit - count, 0) then
        return false
      end
      count = count + cost
    elseif wait < to_edge + period then
      if max(count - limit, 0) + cost > limit then
        return false
      end
      count = max(count, limit) + cost
    else
      return false
    end
    s.window_start = window
    s.count = count
  end
  return true, max(limit - count, 0), reset_of(p, count, to_edge), now
end

-- Settles: back to the reservation's window while it counts (not a window closed by a later
-- reservation), or charged to this window (beyond its limit: the next one), up to 2 x limit.
function fixed_window.settle(s, p, now, at, reserved, actual)
  local limit, period = p.limit, p.period
  now = max(now, s.window_start)
  local window, count, to_edge = window_at(s, p, now)
  local reserved_window = at - fmod(at, period)
  if actual <= reserved then
    local back = reserved - actual
    if reserved_window == window and count <= limit then
      count = count - min(back, count)
    elseif reserved_window == window + period then
      count = count - min(back, max(count - limit, 0))
    end
  else
    count = min(count + (actual - reserved), 2 * limit)
  end
  s.window_start = window
  s.count = count
  return max(limit - count, 0), reset_of(p, count, to_edge)
end

function fixed_window.refund(s, p, now, cost, mark)
  if s.window_start ~= mark then
    return false -- that window is over: its units no longer count
  end
  s.count = max(s.count - cost, 0)
  return true
end
