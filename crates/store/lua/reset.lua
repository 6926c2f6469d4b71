#!lua
-- reset.lua: clears one key (Store::reset) and tells every process's deny cache, in one
-- atomic step (deny_cache.rs): DEL, then PUBLISH of the key's name on `<prefix>deny-cache`
-- (the prefix is the name without its 11 hash characters, see keys.rs). `redis.pcall`: a user
-- whose ACL refuses the channel still resets (its processes cannot subscribe either, so their
-- caches stay off).
--
-- KEYS[1]  the state key.
-- ARGV[1]  unused ('' or now), as every script call sends it.
-- Returns the number of keys deleted (0 or 1).

local deleted = redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', string.sub(KEYS[1], 1, -12) .. 'deny-cache', KEYS[1])
return deleted
