-- batch.lua: the driver that decides a batch of check items all-or-nothing in ONE script call
-- (Floodgate's Store::check / Store::peek semantics, crates/store/src/lib.rs). Appended after
-- common.lua, the algorithm files and driver.lua (Redis scripts cannot include one another);
-- driver.lua defines ALGORITHMS, now, load_item and decide_batch.
--
-- KEYS[i]  the distinct state keys of the batch (all in one cluster slot).
-- ARGV[1]  now in microseconds since the Unix epoch, or '' to read the server clock (TIME).
-- ARGV[2]  '1' = check (write back when every item admits), '0' = peek (never write).
-- ARGV[3]  extra TTL milliseconds added to every TTL (0 in production).
-- then 8 values per item, in batch order:
--   key index (into KEYS), algorithm (1 fixed_window, 2 sliding_log, 3 sliding_window,
--   4 token_bucket, 5 leaky_bucket, 6 gcra), limit, period (us), burst, num, den (the emission
--   interval period / limit in lowest terms), cost (0 <= cost <= capacity, checked by the caller).
--
-- Returns {all_allowed (1/0), now, then 9 integers per item (decide_batch in driver.lua)}.
-- When the batch is denied, or for a peek, the caller reports the peeks (before each item's own
-- consumption); when admitted, the decisions after consumption. Both go back: a cross-slot batch
-- that another slot denied reports the peeks of a group that was committed here (and is then
-- refunded).

local function item(i, states, algo_of)
  return load_item(3 + (i - 1) * 8, states, algo_of)
end

local reply = { 0, now }
if decide_batch((#ARGV - 3) / 8, now, ARGV[2] == '1', tonumber(ARGV[3]), reply, item, false) then
  reply[1] = 1
end
return reply
