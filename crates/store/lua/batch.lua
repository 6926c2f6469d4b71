-- batch.lua: the driver that decides a batch of check items all-or-nothing in ONE script call
-- (Floodgate's Store::check / Store::peek semantics, crates/store/src/lib.rs). Appended after
-- common.lua, the six algorithm files and driver.lua (Redis scripts cannot include one
-- another); driver.lua defines ALGORITHMS, now and load_item.
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
-- Returns {all_allowed (1/0), now, then 9 integers per item: the peek decision (allowed 1/0,
-- remaining, reset_after, retry_after or -1), the decision after consumption (the same four;
-- equal to the peek when nothing was consumed), and mark (what a refund needs: the window or
-- the log timestamp written, else 0)}.
--
-- Items are decided in order on Lua tables: an item sees earlier same-key items' tentative
-- consumption (exactly as the memory store does). Only when every item admits and ARGV[2] is
-- '1' is anything written, each key with PEXPIRE = ceil(reset_after / 1000) ms of the last
-- consuming decision on it (docs/spec/README.md, "Writes and TTL"). When the batch is denied,
-- or for a peek, the caller reports the peeks (before each item's own consumption); when
-- admitted, the decisions after consumption.

local commit = ARGV[2] == '1'
local extra_ms = tonumber(ARGV[3])
local n = (#ARGV - 3) / 8

local states = {} -- key index -> state table
local algo_of = {} -- key index -> algorithm table
local reset_of = {} -- key index -> reset_after of the last consuming decision
local peeks, consumed = {}, {}
local all = true
for i = 1, n do
  local ki, a, p, cost, s = load_item(3 + (i - 1) * 8, states, algo_of)
  local allowed, remaining, reset_after, retry_after, mark = a.decide(s, p, now, cost, false)
  peeks[i] = { allowed and 1 or 0, remaining, reset_after, retry_after, mark }
  if allowed and cost > 0 then
    allowed, remaining, reset_after, retry_after, mark = a.decide(s, p, now, cost, true)
    consumed[i] = { allowed and 1 or 0, remaining, reset_after, retry_after, mark }
    reset_of[ki] = reset_after
  else
    consumed[i] = peeks[i]
    if not allowed then
      all = false
    end
  end
end

if all and commit then
  for ki, reset_after in pairs(reset_of) do
    algo_of[ki].save(KEYS[ki], states[ki], ttl_ms(reset_after, extra_ms))
  end
end

-- Both decisions go back: a cross-slot batch that another slot denied reports the peeks of a
-- group that was committed here (and is then refunded).
local reply = { all and 1 or 0, now }
for i = 1, n do
  local pk, cd = peeks[i], consumed[i]
  for j = 1, 4 do
    reply[#reply + 1] = pk[j]
  end
  for j = 1, 4 do
    reply[#reply + 1] = cd[j]
  end
  reply[#reply + 1] = cd[5]
end
return reply
