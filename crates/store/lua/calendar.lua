#!lua
-- Calendar windows (docs/spec/calendar.md): the fixed window and the sliding window counter in
-- calendar periods of a time zone, for a batch of keys decided all-or-nothing.
--
-- The service computes, for each item, six consecutive period starts b0 < ... < b5 around its own
-- now (b2 <= now < b3). The script places ITS time (Redis' TIME, or ARGV[1] in tests) in them:
-- the window is the i in 1..3 with b[i] <= t < b[i+1], so a Redis clock up to a whole period off
-- the service's still decides in its own period; outside, 'calendar_out_of_range' and no write.
--
-- KEYS[i]: the state of item i, the string "window_start count previous_count" (missing: fresh)
-- ARGV[1]: now (us) or '' for TIME; ARGV[2]: 1 = check (consume when all admit), 0 = peek
-- ARGV[3]: milliseconds added to every TTL (RedisStoreConfig::ttl_extra)
-- ARGV[4 + 9 (i - 1) ...]: kind (1 fixed window, 3 sliding window), limit, cost, b0 .. b5
-- Reply: { all_allowed, then per item: allowed, remaining, reset_after, retry_after or -1 }
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local commit = ARGV[2] == '1'
local ttl_extra = tonumber(ARGV[3])

-- floor(a / d) for 0 <= a < 2^53, d >= 1 (docs/spec/README.md, "Notes for Lua")
local function floor_div(a, d)
  local q = math.floor(a / d)
  if q * d > a then q = q - 1 end
  return q
end

local function load(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0, 0 end
  local ws, c, p = string.match(v, '^(%d+) (%d+) (%d+)$')
  return tonumber(ws), tonumber(c), tonumber(p)
end

-- Decides item i from the state (ws, count, prev), consuming when `consume` (a peek otherwise);
-- returns allowed, remaining, reset_after, retry_after (-1), and the state after it.
local function decide(i, ws, count, prev, consume)
  local base = 4 + 9 * (i - 1)
  local kind, limit, cost = tonumber(ARGV[base]), tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local b = {}
  for j = 0, 5 do b[j] = tonumber(ARGV[base + 3 + j]) end
  local t = now
  if ws > t then t = ws end -- backwards time: never reopen an older window
  local ps, s, e, ne
  for j = 1, 3 do
    if b[j] <= t and t < b[j + 1] then ps, s, e, ne = b[j - 1], b[j], b[j + 1], b[j + 2] end
  end
  if not s then return nil end
  if kind == 1 then
    local cur = 0
    if ws == s then cur = count elseif ws == ps then cur = math.max(0, count - limit) end
    local allowed = cost <= limit - cur
    local after = cur
    if allowed and consume and cost > 0 then after = cur + cost end
    local to_edge = e - t
    local reset = 0
    if after > 0 then reset = to_edge end
    local retry = -1
    if not allowed then
      if math.max(0, cur - limit) + cost <= limit then retry = to_edge else retry = ne - t end
    end
    return allowed, math.max(0, limit - after), reset, retry, s, after, 0
  end
  local previous, current = 0, 0
  if ws == s then previous, current = prev, count elseif ws == ps then previous = count end
  local len = e - s
  local overlap = len - 1 - (t - s)
  local weight = previous * overlap
  local room = limit - current - cost
  local allowed = cost == 0 or (room >= 0 and weight <= room * len)
  local after = current
  if allowed and consume and cost > 0 then after = current + cost end
  local remaining = math.max(0, limit - after - floor_div(weight + len - 1, len))
  local reset = 0
  if after > 0 then reset = ne - 1 - t elseif previous > 0 then reset = overlap end
  local retry = -1
  if not allowed then
    if room >= 0 then
      retry = overlap - floor_div(room * len, previous)
    else
      local nlen = ne - e
      local first = math.max(0, nlen - 1 - floor_div((limit - cost) * nlen, current))
      retry = e - t + first
    end
  end
  return allowed, remaining, reset, retry, s, after, previous
end

-- Every item decided; a batch admits only when all do, and only then is anything written.
local function run(consume)
  local reply, writes, all = { 1 }, {}, true
  for i = 1, #KEYS do
    local ws, count, prev = load(KEYS[i])
    local allowed, remaining, reset, retry, nws, ncount, nprev = decide(i, ws, count, prev, consume)
    if allowed == nil then return nil end
    if not allowed then all = false end
    reply[#reply + 1] = allowed and 1 or 0
    reply[#reply + 1] = remaining
    reply[#reply + 1] = reset
    reply[#reply + 1] = retry
    if consume and allowed and ncount ~= count or (consume and allowed and nws ~= ws) then
      writes[#writes + 1] = { KEYS[i], nws, ncount, nprev, reset }
    end
  end
  if not all then reply[1] = 0 end
  return reply, writes, all
end

local reply, writes, all = run(commit)
if reply == nil then return redis.error_reply('calendar_out_of_range') end
if commit and not all then
  -- denied: nothing consumed, every decision a peek of the stored state
  reply = run(false)
  reply[1] = 0
  return reply
end
for _, w in ipairs(writes) do
  redis.call('SET', w[1], string.format('%d %d %d', w[2], w[3], w[4]),
    'PX', math.max(1, math.floor((w[5] + 999) / 1000)) + ttl_extra)
end
return reply
