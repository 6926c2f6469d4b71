-- multi.lua: decides SEVERAL independent batches in ONE script call: the store coalesces the
-- checks that are already waiting for Redis (crates/store/src/redis/coalesce.rs), so that
-- Redis' fixed cost per script call (reading the request, finding the script, running its
-- chunk, writing the reply) is paid once for many decisions. Each batch is all-or-nothing on its
-- own, exactly as if batch.lua had run it alone at that point: batches run in order, and a
-- later batch reads what an earlier one wrote. Appended after common.lua, the algorithm files
-- and driver.lua (which defines ALGORITHMS, now and decide_batch).
--
-- KEYS     every batch's distinct keys, batch after batch (standalone Redis only).
-- ARGV[1]  '' when some batch uses the server clock (TIME is then read once), else '0'.
-- ARGV[2]  extra TTL milliseconds added to every TTL (0 in production).
-- ARGV[3]  P, the number of distinct policies, then 6 values per policy: algorithm (as in
--          batch.lua), limit, period (us), burst, num, den. Sent once per call, however many
--          items use them: parsing arguments is a good part of a decision's cost in Redis.
-- then per batch: commit (1 = check, 0 = peek), clock (1 = the caller's time follows, 0 = the
--   server clock), now (ignored when clock = 0), n (items), then 3 values per item: key index
--   (into the whole KEYS), policy index (1-based), cost.
--
-- Returns, per batch: status (1 every item admitted, 0 denied, -1 the batch raised an error,
-- e.g. a key of another type: nothing of it was written and the caller runs it alone to get the
-- error; its neighbours are unaffected), then 4 integers per item (allowed, remaining,
-- reset_after, retry_after or -1): the decision after consumption when status is 1 and the
-- batch is a check, else the peek; zeros after an error.

local extra_ms = tonumber(ARGV[2])
local policies = {}
local np = tonumber(ARGV[3])
for j = 1, np do
  local o = 3 + (j - 1) * 6
  policies[j] = {
    a = ALGORITHMS[tonumber(ARGV[o + 1])],
    p = {
      limit = tonumber(ARGV[o + 2]),
      period = tonumber(ARGV[o + 3]),
      burst = tonumber(ARGV[o + 4]),
      num = tonumber(ARGV[o + 5]),
      den = tonumber(ARGV[o + 6]),
    },
  }
end

local base -- the ARGV index before the current batch's first item value
local function item(i, states, algo_of)
  local o = base + (i - 1) * 3
  local ki = tonumber(ARGV[o + 1])
  local pol = policies[tonumber(ARGV[o + 2])]
  if states == nil then
    return ki, pol.a, pol.p, tonumber(ARGV[o + 3]), pol.a.load(KEYS[ki], pol.p)
  end
  local s = states[ki]
  if s == nil then
    s = pol.a.load(KEYS[ki], pol.p)
    states[ki] = s
    algo_of[ki] = pol.a
  end
  return ki, pol.a, pol.p, tonumber(ARGV[o + 3]), s
end

local reply = {}
local b = 3 + np * 6
local last = #ARGV
while b < last do
  local commit = ARGV[b + 1] == '1'
  local t = now
  if ARGV[b + 2] == '1' then
    t = tonumber(ARGV[b + 3])
  end
  local n = tonumber(ARGV[b + 4])
  base = b + 4
  local at = #reply + 1
  reply[at] = 0
  local ok, all = pcall(decide_batch, n, t, commit, extra_ms, reply, item, true)
  if not ok then
    reply[at] = -1
    for k = at + 1, at + 9 * n do
      reply[k] = nil
    end
    for k = at + 1, at + 4 * n do
      reply[k] = 0
    end
  elseif all then
    reply[at] = 1
  end
  b = base + 3 * n
end
return reply
