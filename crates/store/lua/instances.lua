#!lua
-- instances.lua: one Floodgate process announces itself and learns how many are live
-- (crates/store/src/redis/instances.rs). Not a decision script: it touches only this key.
--
-- KEYS[1]  the instance set: a sorted set of instance ids, each scored with the time its
--          announcement expires (microseconds since the Unix epoch).
-- ARGV[1]  now in microseconds, or '' to read the server clock (TIME).
-- ARGV[2]  this instance's id.
-- ARGV[3]  how long the announcement lives (microseconds).
-- ARGV[4]  the set's own PEXPIRE (milliseconds): it disappears when every process is gone.
--
-- Returns the number of live instances (this one included): ids whose announcement has not
-- expired at now.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
-- Microsecond times stay below 2^53: exact; '%.0f' writes every digit.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('ZCARD', KEYS[1])
