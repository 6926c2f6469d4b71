-- sliding_log.lua: the exact sliding log, docs/spec/sliding_log.md ("Decision", "Pruning",
-- "TTL"). A library file (no KEYS/ARGV of its own).
--
-- State: ONE Redis string, not a sorted set with a member per unit of cost:
--   header  24 bytes  struct '<ddd': oldest, newest, total (integers < 2^53, exact as doubles)
--   records  8 bytes each, struct '<I4I4' = the little-endian u64 word `gap << 19 | cost` of the
--            Rust memory store (gap: 45 bits, microseconds since the previous record, 0 for the
--            first; cost: 19 bits, at most 524,287, a larger cost spilling into further records
--            with gap 0). Split into two 32-bit halves so that no double ever holds 64 bits:
--            lo = (gap mod 2^13) x 2^19 + cost, hi = floor(gap / 2^13).
-- So a key costs 24 + 8 bytes per remembered timestamp (requests at the same microsecond share
-- a record) plus Redis' own overhead. A missing key is the empty log.
--   last_update (the effective now of the last admission, reservation or settle) is the newest
--   entry's time unless units are reserved for later or a settle moved it: then the header is
--   '<dddd' oldest, newest, -(total) - 1 (negative: a fourth double follows), last_update, and
--   the records start at byte 33. A value of a version without it always has total >= 0.
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (the timestamp the entry was logged at).
-- refund(s, p, now, cost, mark): removes `cost` units from the entry logged at `mark`.

local sliding_log = {}

local WORD_COST = 524287 -- 2^19 - 1
local COST_SPAN = 524288 -- 2^19
local GAP_SPLIT = 8192 -- 2^13

function sliding_log.load(key)
  local raw = redis.call('GET', key)
  if not raw then
    return { oldest = 0, newest = 0, total = 0, rec = '', last_update = 0, exists = false }
  end
  local oldest, newest, total = struct.unpack('<ddd', raw)
  if total < 0 then
    local last_update = struct.unpack('<d', raw, 25)
    return { oldest = oldest, newest = newest, total = -total - 1, rec = string.sub(raw, 33),
      last_update = last_update, exists = true }
  end
  return { oldest = oldest, newest = newest, total = total, rec = string.sub(raw, 25),
    last_update = newest, exists = true }
end

local function encode(s)
  if s.last_update ~= s.newest then
    return struct.pack('<dddd', s.oldest, s.newest, -s.total - 1, s.last_update) .. s.rec
  end
  return struct.pack('<ddd', s.oldest, s.newest, s.total) .. s.rec
end

function sliding_log.save(key, s, ttl)
  if ttl then
    redis.call('SET', key, encode(s), 'PX', ttl)
  elseif s.total == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, encode(s), 'KEEPTTL')
  end
end

-- The record at byte `pos` (1-based): gap and cost. Divisions by powers of two are exact.
local function record(rec, pos)
  local lo, hi = struct.unpack('<I4I4', rec, pos)
  return hi * GAP_SPLIT + math.floor(lo / COST_SPAN), lo % COST_SPAN
end

local function pack(gap, cost)
  return struct.pack('<I4I4', (gap % GAP_SPLIT) * COST_SPAN + cost, math.floor(gap / GAP_SPLIT))
end

-- Calls f(pos, t, cost) for each record in order until f returns true; returns that record's
-- pos and t (nil when none did).
local function walk(s, f)
  local t = s.oldest
  local n = #s.rec
  local pos = 1
  while pos <= n do
    local gap, cost = record(s.rec, pos)
    if pos > 1 then
      t = t + gap
    end
    if f(pos, t, cost) then
      return pos, t
    end
    pos = pos + 8
  end
  return nil, nil
end

-- Drops every record expired at `now` (the state must not be empty afterwards unless all were).
local function prune(s, now, period)
  local expired_cost = 0
  local pos, t = walk(s, function(_, t, cost)
    if now - t < period then
      return true
    end
    expired_cost = expired_cost + cost
    return false
  end)
  if pos == nil then
    s.oldest, s.newest, s.total, s.rec = 0, 0, 0, ''
    return
  end
  local _, cost = record(s.rec, pos)
  -- the first record's gap is always 0, as in the Rust store
  s.rec = pack(0, cost) .. string.sub(s.rec, pos + 8)
  s.oldest = t
  s.total = s.total - expired_cost
end

local function push(s, now, cost)
  local gap = 0
  if #s.rec == 0 then
    s.oldest = now
  else
    gap = now - s.newest
  end
  s.total = s.total + cost
  s.newest = now
  if gap == 0 and #s.rec > 0 then
    local pos = #s.rec - 7
    local last_gap, last_cost = record(s.rec, pos)
    local add = min(WORD_COST - last_cost, cost)
    s.rec = string.sub(s.rec, 1, pos - 1) .. pack(last_gap, last_cost + add)
    cost = cost - add
  end
  while cost > 0 do
    local chunk = min(cost, WORD_COST)
    s.rec = s.rec .. pack(gap, chunk)
    cost = cost - chunk
    gap = 0
  end
end

-- Units live at `now >= newest`: the total less the expired prefix.
local function live_at(s, now, period)
  local expired_cost = 0
  walk(s, function(_, t, c)
    if now - t < period then
      return true
    end
    expired_cost = expired_cost + c
    return false
  end)
  return s.total - expired_cost
end

-- Microseconds after `now >= newest` until enough of the oldest live entries expire to free
-- `excess` units (0 < excess <= live).
local function wait_for(s, now, period, excess)
  local freed = 0
  local _, t = walk(s, function(_, t, c)
    if now - t >= period then
      return false
    end
    freed = freed + c
    return freed >= excess
  end)
  if t == nil then
    return period -- unreachable: every live entry expiring frees them all
  end
  return period - (now - t)
end

function sliding_log.decide(s, p, now, cost, consume)
  local limit, period = p.limit, p.period
  -- backwards time: no time passed since the last admission; never expire anything early
  now = max(now, s.last_update)
  if s.newest > now then
    -- units are reserved for later: a request queues behind them (first fits at or after
    -- the newest entry); only a peek is allowed now
    local start = s.newest
    local live = live_at(s, start, period)
    local at_start = 0
    if cost > max(limit - live, 0) then
      at_start = wait_for(s, start, period, live + cost - limit)
    end
    local retry_after = -1
    if cost > 0 then
      retry_after = start - now + at_start
    end
    return cost == 0, 0, start + period - now, retry_after, now
  end
  local live = live_at(s, now, period)
  local allowed = cost <= max(limit - live, 0)
  local retry_after = -1
  if not allowed then
    -- the oldest live entries expire first: wait for the one that frees `excess`
    retry_after = wait_for(s, now, period, live + cost - limit)
  end
  local live_after = live
  if allowed and consume and cost > 0 then
    prune(s, now, period)
    push(s, now, cost)
    s.last_update = now
    live_after = live + cost
  end
  local reset_after = 0
  if live_after > 0 then
    reset_after = period - (now - s.newest)
  end
  return allowed, max(limit - live_after, 0), reset_after, retry_after, now
end

-- The longest reservation wait: one period, less for periods above 2^44 us (a reserved
-- entry's gap from the newest live one must fit 45 bits).
function sliding_log.max_wait(p)
  return max(min(p.period, 35184372088831 - p.period), 0)
end

-- Reserves `cost` units for now + wait: logged at that time, never before the newest entry.
-- (2^45 - 1 = 35184372088831.)
-- Returns false when they do not fit then, else true, remaining, reset_after and the
-- effective now.
function sliding_log.reserve_at(s, p, now, cost, wait)
  local limit, period = p.limit, p.period
  if wait > sliding_log.max_wait(p) then
    return false
  end
  now = max(now, s.last_update)
  if cost > 0 then
    -- logged at the scheduled time; only what expired by now is dropped (entries that expire
    -- before the scheduled time still count until then: a settle may take the reservation
    -- back)
    local at = now + wait
    if at < s.newest or cost > max(limit - live_at(s, at, period), 0) then
      return false
    end
    prune(s, now, period)
    push(s, at, cost)
    s.last_update = now
  end
  local _, remaining, reset_after = sliding_log.decide(s, p, now, 0, false)
  return true, remaining, reset_after, now
end

-- The log as merged (t, cost) lists.
local function merged(s)
  local ts, cs = {}, {}
  walk(s, function(_, t, c)
    if #ts > 0 and ts[#ts] == t then
      cs[#cs] = cs[#cs] + c
    else
      ts[#ts + 1] = t
      cs[#cs + 1] = c
    end
    return false
  end)
  return ts, cs
end

local function rebuild(s, ts, cs)
  s.oldest, s.newest, s.total, s.rec = 0, 0, 0, ''
  for i = 1, #ts do
    if cs[i] > 0 then
      push(s, ts[i], cs[i])
    end
  end
end

-- Settles: the reservation's own entry (at `at`) loses the difference, or gains the charge
-- (up to a total of 2 x limit; logged at max(now, newest) when the entry is gone).
function sliding_log.settle(s, p, now, at, reserved, actual)
  local limit, period = p.limit, p.period
  now = max(now, s.last_update)
  -- expired entries count for nothing: gone first (an expired reservation gets nothing back,
  -- and a charge is never logged where it no longer counts)
  prune(s, now, period)
  local ts, cs = merged(s)
  local own = nil
  for i = 1, #ts do
    if ts[i] == at then
      own = i
    end
  end
  if actual <= reserved then
    if own then
      cs[own] = cs[own] - min(reserved - actual, cs[own])
    end
  else
    local extra = min(actual - reserved, max(2 * limit - s.total, 0))
    if own then
      cs[own] = cs[own] + extra
    else
      local t = max(now, s.newest)
      if #ts > 0 and ts[#ts] == t then
        cs[#cs] = cs[#cs] + extra
      else
        ts[#ts + 1] = t
        cs[#cs + 1] = extra
      end
    end
  end
  rebuild(s, ts, cs)
  s.last_update = now
  local _, remaining, reset_after = sliding_log.decide(s, p, now, 0, false)
  return remaining, reset_after
end

-- Decodes the log into merged (t, cost) entries, removes `cost` units from the entry at
-- `mark`, and re-encodes it. O(entries); refunds are rare (a denied cross-slot batch).
function sliding_log.refund(s, p, now, cost, mark)
  local ts, cs = {}, {}
  walk(s, function(_, t, c)
    if #ts > 0 and ts[#ts] == t then
      cs[#cs] = cs[#cs] + c
    else
      ts[#ts + 1] = t
      cs[#cs + 1] = c
    end
    return false
  end)
  local found = false
  for i = 1, #ts do
    if ts[i] == mark then
      local take = min(cs[i], cost)
      cs[i] = cs[i] - take
      found = take > 0
    end
  end
  if not found then
    return false
  end
  -- `newest` stays the last record's time (push computes gaps from it)
  s.oldest, s.newest, s.total, s.rec = 0, 0, 0, ''
  for i = 1, #ts do
    if cs[i] > 0 then
      push(s, ts[i], cs[i])
    end
  end
  return true
end
