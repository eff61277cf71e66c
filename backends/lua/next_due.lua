#!lua flags=no-writes
-- next_due: ms from now until the queue's earliest PENDING job is eligible (0 = now), or
-- false when it holds none. Read-only: runs under OOM.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] number of priorities n (1..n are read)
-- One ZRANGE 0 0 on ra0 per priority (members sort by run_after as text). Returns a decimal
-- string.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local earliest = nil
for prio = 1, tonumber(ARGV[4]) do
  local first = redis.call('ZRANGE', pl_ra_index(qprefix, prio, '0'), 0, 0)[1]
  if first then
    local ra = tonumber(string.sub(first, 1, 16)) - PL_RA_OFFSET
    if earliest == nil or ra < earliest then earliest = ra end
  end
end
if earliest == nil then return false end
return pl_int(math.max(0, earliest - pl_now(ARGV[3])))
