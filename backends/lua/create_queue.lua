#!lua
-- create_queue: register a queue on this shard (idempotent).
-- KEYS[1] registry HASH  pl:<shard>:queues  (queue name -> highest priority created)
-- ARGV[1] queue name
-- ARGV[2] number of priorities configured now
-- Job keys need no creation; the registry remembers the highest priority ever configured so
-- delete_queue also removes levels that were configured once and dropped since.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
