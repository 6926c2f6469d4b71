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
    return { oldest = 0, newest = 0, total = 0, rec = '', exists = false }
  end
  local oldest, newest, total = struct.unpack('<ddd', raw)
  return { oldest = oldest, newest = newest, total = total, rec = string.sub(raw, 25),
    exists = true }
end

local function encode(s)
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

function sliding_log.decide(s, p, now, cost, consume)
  local limit, period = p.limit, p.period
  -- backwards time: never expire anything early
  now = max(now, s.newest)
  -- live entries are a suffix: subtract the expired prefix from the total
  local expired_cost = 0
  walk(s, function(_, t, c)
    if now - t < period then
      return true
    end
    expired_cost = expired_cost + c
    return false
  end)
  local live = s.total - expired_cost
  local allowed = cost <= max(limit - live, 0)
  local retry_after = -1
  if not allowed then
    -- the oldest live entries expire first: wait for the one that frees `excess`
    local excess = live + cost - limit
    local freed = 0
    local _, t = walk(s, function(_, t, c)
      if now - t >= period then
        return false
      end
      freed = freed + c
      return freed >= excess
    end)
    retry_after = period - (now - t)
  end
  local live_after = live
  if allowed and consume and cost > 0 then
    prune(s, now, period)
    push(s, now, cost)
    live_after = live + cost
  end
  local reset_after = 0
  if live_after > 0 then
    reset_after = period - (now - s.newest)
  end
  return allowed, max(limit - live_after, 0), reset_after, retry_after, now
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
