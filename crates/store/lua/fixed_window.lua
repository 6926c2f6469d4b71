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

function fixed_window.decide(s, p, now, cost, consume)
  local limit, period = p.limit, p.period
  -- backwards time: never reopen an older window
  now = max(now, s.window_start)
  local elapsed = fmod(now, period)
  local window = now - elapsed
  local count = 0
  if window == s.window_start then
    count = s.count
  end
  local allowed = cost <= max(limit - count, 0)
  local count_after = count
  if allowed and consume and cost > 0 then
    s.window_start = window
    s.count = count + cost
    count_after = s.count
  end
  local to_edge = period - elapsed
  local reset_after = 0
  if count_after > 0 then
    reset_after = to_edge
  end
  local retry_after = -1
  if not allowed then
    retry_after = to_edge
  end
  return allowed, max(limit - count_after, 0), reset_after, retry_after, window
end

function fixed_window.refund(s, p, now, cost, mark)
  if s.window_start ~= mark then
    return false -- that window is over: its units no longer count
  end
  s.count = max(s.count - cost, 0)
  return true
end
