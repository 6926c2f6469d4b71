-- multi.lua: decides SEVERAL independent batches in ONE script call: the store coalesces the
-- checks that are already waiting for Redis (crates/store/src/redis/coalesce.rs), so that
-- Redis' fixed cost per script call (about 10 us here: EVALSHA lookup, running the chunk,
-- argument conversion) is paid once for many decisions. Each batch is all-or-nothing on its
-- own, exactly as if batch.lua had run it alone at that point: batches run in order, and a
-- later batch reads what an earlier one wrote. Appended after common.lua, the algorithm files
-- and driver.lua (which defines ALGORITHMS, now, load_item and decide_batch).
--
-- KEYS     every batch's distinct keys, batch after batch (standalone Redis only).
-- ARGV[1]  '' when some batch uses the server clock (TIME is then read once), else '0'.
-- ARGV[2]  extra TTL milliseconds added to every TTL (0 in production).
-- then per batch: commit (1 = check, 0 = peek), clock (1 = the caller's time follows, 0 = the
--   server clock), now (ignored when clock = 0), n (items), then 8 values per item as in
--   batch.lua, the key index counting into the whole KEYS.
--
-- Returns, per batch: status (1 every item admitted, 0 denied, -1 the batch raised an error,
-- e.g. a key of another type: nothing of it was written and the caller runs it alone to get
-- the error; its neighbours are unaffected), then 9 integers per item (zeros after an error).

local extra_ms = tonumber(ARGV[2])
local reply = {}
local b = 2
while b < #ARGV do
  local commit = ARGV[b + 1] == '1'
  local t = now
  if ARGV[b + 2] == '1' then
    t = tonumber(ARGV[b + 3])
  end
  local n = tonumber(ARGV[b + 4])
  local at = #reply + 1
  reply[at] = 0
  local ok, all = pcall(decide_batch, b + 4, n, t, commit, extra_ms, reply)
  if not ok then
    reply[at] = -1
    for k = at + 1, at + 9 * n do
      reply[k] = 0
    end
  elseif all then
    reply[at] = 1
  end
  b = b + 4 + 8 * n
end
return reply
