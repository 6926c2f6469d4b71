-- refund.lua: gives back what an admitted batch group consumed, when another group of the same
-- cross-slot batch denied (the cross-slot protocol of crates/store/src/redis/mod.rs). Appended
-- after common.lua, the six algorithm files and driver.lua (which defines ALGORITHMS, now and
-- load_item).
--
-- KEYS[i]  the distinct state keys of the group (one cluster slot).
-- ARGV[1]  now in microseconds since the Unix epoch, or '' to read the server clock (TIME).
-- then 9 values per item: key index, algorithm, limit, period, burst, num, den, cost, mark
-- (the `mark` batch.lua returned for that item).
--
-- Per algorithm (each refund keeps the key's TTL; a key that expired meanwhile is left alone):
--   fixed window    count -= cost, if the window `mark` is still the current one
--   sliding window  count -= cost in window `mark`, or previous_count -= cost once it rolled
--   sliding log     the entry logged at `mark` loses `cost` units (removed at 0)
--   token bucket    tokens += cost x interval at now (capped at the capacity)
--   leaky bucket    level -= cost x interval at now (not below 0)
--   gcra            tat -= cost x interval ticks (not before now)
-- Returns the number of items refunded.

local n = (#ARGV - 1) / 9
local states, algo_of, dirty = {}, {}, {}
local refunded = 0
for i = 1, n do
  local b = 1 + (i - 1) * 9
  local ki, a, p, cost, s = load_item(b, states, algo_of)
  local mark = tonumber(ARGV[b + 9])
  if s.exists and cost > 0 and a.refund(s, p, now, cost, mark) then
    dirty[ki] = true
    refunded = refunded + 1
  end
end
for ki in pairs(dirty) do
  -- no TTL argument: the key keeps its TTL (a refunded state is never older than it)
  algo_of[ki].save(KEYS[ki], states[ki], nil)
end
return refunded
