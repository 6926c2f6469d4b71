-- settle.lua: settles reservations with their actual costs (Store::settle,
-- docs/spec/reservations.md), each item on its own key. Appended after common.lua, the
-- algorithm files and driver.lua (which defines ALGORITHMS, now and load_item).
--
-- KEYS[i]  the distinct state keys (all in one cluster slot).
-- ARGV[1]  now in microseconds since the Unix epoch, or '' to read the server clock (TIME).
-- ARGV[2]  extra TTL milliseconds added to every TTL (0 in production).
-- then 10 values per item: key index, algorithm, limit, period, burst, num, den, reserved
--   (the units reserved), actual (the units used), scheduled_at (the reservation's time, us).
--
-- A missing (expired) key gets nothing back; a charge on it starts from the fresh state. Each
-- settled key is written with the TTL of its new reset_after (a give-back may shorten it).
-- Returns 2 integers per item: remaining and reset_after after the settle.
--
-- A settle whose actual cost differs from the reserved one changes the key other than a check
-- does (a give-back can end a denial early): it PUBLISHes the key's name on the deny cache's
-- channel, `<prefix>deny-cache` (the prefix is the name without its 11 hash characters, see
-- keys.rs), in the same atomic step as the write, so every process drops a cached denial of
-- it (deny_cache.rs). `redis.pcall`: a user whose ACL refuses the channel still settles (its
-- processes cannot subscribe either, so their caches stay off).

local extra_ms = tonumber(ARGV[2])
local n = (#ARGV - 2) / 10
local states, algo_of = {}, {}
local reply = {}
for i = 1, n do
  local b = 2 + (i - 1) * 10
  local ki, a, p, reserved, s = load_item(b, states, algo_of)
  local actual = tonumber(ARGV[b + 9])
  local at = tonumber(ARGV[b + 10])
  local remaining, reset_after
  if not s.exists and actual <= reserved then
    local _
    _, remaining, reset_after = a.decide(s, p, now, 0, false)
  else
    remaining, reset_after = a.settle(s, p, now, at, reserved, actual)
    s.exists = true
    a.save(KEYS[ki], s, ttl_ms(reset_after, extra_ms))
    if actual ~= reserved then
      redis.pcall('PUBLISH', string.sub(KEYS[ki], 1, -12) .. 'deny-cache', KEYS[ki])
    end
  end
  reply[2 * i - 1], reply[2 * i] = remaining, reset_after
end
return reply
