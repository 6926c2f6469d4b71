-- reserve.lua: the driver that reserves a batch of items for ONE wait, all or nothing
-- (Store::reserve, docs/spec/reservations.md). Appended after common.lua, the algorithm files
-- and driver.lua (which defines ALGORITHMS, now and load_item).
--
-- KEYS[i]  the distinct state keys of the batch (all in one cluster slot).
-- ARGV[1]  now in microseconds since the Unix epoch, or '' to read the server clock (TIME).
-- ARGV[2]  max_wait (us): the longest wait the caller accepts.
-- ARGV[3]  extra TTL milliseconds added to every TTL (0 in production).
-- ARGV[4]  0 to find the wait (the longest of the items' shortest waits), or 1 + the wait to
--          reserve for: a cross-slot batch finds it per slot first (ARGV[5] = 0), then
--          reserves every slot for the longest of them.
-- ARGV[5]  '1' = write when granted, '0' = only find the wait (nothing is written).
-- then 8 values per item, as in batch.lua: key index, algorithm, limit, period, burst, num, den,
--   cost.
--
-- Pass 1 (on copies, each item seeing the earlier items' tentative reservations) finds each
-- item's shortest wait after its key's effective now: its check's retry_after (0 when it
-- admits), within the algorithm's max_wait. Pass 2 reserves every item for the wait
-- (reserve_at); an item that does not fit then denies the batch. A granted batch writes each
-- key once with the TTL of its last reservation's reset_after.
--
-- Returns {granted (1/0), now, wait (0 when denied), then 9 integers per item: the peek
-- decision (allowed 1/0, remaining, reset_after, retry_after or -1), the decision after the
-- reservation (the same four; the peek again when denied) and its scheduled time (0 when
-- denied)}.
--
-- A reservation granted for a wait > 0 moves its keys' states later than any cached denial
-- said: it PUBLISHes each written key's name on `<prefix>deny-cache` (as settle.lua does), in
-- the same atomic step as the write. A wait of 0 needs units now, which a key with a cached
-- denial has none of: nothing to tell.

local max_wait = tonumber(ARGV[2])
local extra_ms = tonumber(ARGV[3])
local target = tonumber(ARGV[4])
local commit = ARGV[5] == '1'
local n = (#ARGV - 5) / 8

local function copy(t)
  local c = {}
  for k, v in pairs(t) do
    c[k] = v
  end
  return c
end

local states, algo_of = {}, {}
local items = {}
for i = 1, n do
  local ki, a, p, cost, s = load_item(5 + (i - 1) * 8, states, algo_of)
  items[i] = { ki = ki, a = a, p = p, cost = cost }
end

local reply = { 0, now, 0 }
local trial = {}
for ki, st in pairs(states) do
  trial[ki] = copy(st)
end
local longest = 0
local feasible = true
for i = 1, n do
  local it = items[i]
  local st = trial[it.ki]
  local allowed, remaining, reset_after, retry_after = it.a.decide(copy(st), it.p, now, it.cost,
    false)
  local k = 3 + (i - 1) * 9
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] =
    allowed and 1 or 0, remaining, reset_after, retry_after
  reply[k + 5], reply[k + 6], reply[k + 7], reply[k + 8], reply[k + 9] =
    allowed and 1 or 0, remaining, reset_after, retry_after, 0
  local wait = 0
  if not allowed then
    wait = retry_after
  end
  if it.a.reserve_at(st, it.p, now, it.cost, wait) then
    longest = max(longest, wait)
  else
    feasible = false
  end
end
if target > 0 then
  feasible = feasible and target - 1 >= longest
  longest = target - 1
end
if not feasible or longest > max_wait then
  return reply
end
reply[3] = longest

-- Pass 2, on the states themselves, or on copies when only finding the wait (then a slot
-- that cannot fit at that wait answers denied, and a cross-slot batch writes nothing).
local work = states
if not commit then
  work = {}
  for ki, st in pairs(states) do
    work[ki] = copy(st)
  end
end
local reset_of = {}
for i = 1, n do
  local it = items[i]
  local k = 3 + (i - 1) * 9
  local ok, remaining, reset_after, eff
  if it.cost > 0 then
    ok, remaining, reset_after, eff = it.a.reserve_at(work[it.ki], it.p, now, it.cost, longest)
    if not ok then
      reply[3] = 0
      return reply
    end
    reset_of[it.ki] = reset_after
  else
    -- a cost-0 item: the standing of its key at this point of the batch
    ok, remaining, reset_after, eff = it.a.reserve_at(copy(work[it.ki]), it.p, now, 0, 0)
  end
  reply[k + 5], reply[k + 6], reply[k + 7], reply[k + 8], reply[k + 9] =
    1, remaining, reset_after, -1, eff + longest
end
if not commit then
  reply[1] = 1
  return reply
end
for ki, reset_after in pairs(reset_of) do
  algo_of[ki].save(KEYS[ki], states[ki], ttl_ms(reset_after, extra_ms))
  if longest > 0 then
    redis.pcall('PUBLISH', string.sub(KEYS[ki], 1, -12) .. 'deny-cache', KEYS[ki])
  end
end
reply[1] = 1
return reply
