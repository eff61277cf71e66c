-- purge_keys: delete up to `limit` unique-key records whose expires_at <= now.
-- (No shebang on purpose: it only deletes, so it runs when Redis is over maxmemory.)
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] limit (>= 1)
-- Reads :ux (expired keys, oldest first) and removes them from :ux and :uk. Returns the count.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local limit = tonumber(ARGV[4])
if limit < 1 then return 0 end
local now = pl_now(ARGV[3])
local xkey = qprefix .. ':ux'
local expired = redis.call('ZRANGEBYSCORE', xkey, '-inf', pl_int(now), 'LIMIT', 0, limit)
if #expired > 0 then
  pl_chunked('HDEL', qprefix .. ':uk', expired)
  pl_chunked('ZREM', xkey, expired)
end
return #expired
