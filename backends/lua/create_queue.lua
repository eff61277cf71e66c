#!lua
-- create_queue: register a queue on this shard (idempotent).
-- KEYS[1] registry HASH  pl:<shard>:queues  (queue name -> highest priority created)
-- ARGV[1] queue name
-- ARGV[2] number of priorities configured now
-- ARGV[3] queue key prefix pl:<shard>:q:<queue>
-- Creates the queue's ledger hash (:ledger, enqueued 0) unless it has one (pl_open_books).
-- Job keys need no creation; the registry remembers the highest priority ever configured so
-- delete_queue also removes levels that were configured once and dropped since.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
pl_open_books(KEYS[1], ARGV[1], ARGV[3])
return 1
