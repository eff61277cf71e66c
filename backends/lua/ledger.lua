#!lua flags=no-writes
-- ledger: one queue's books on this shard, read in one script call (one snapshot: nothing
-- runs between its reads), so the counters and the state counts agree however busy the
-- queue is. Read-only: runs under OOM.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] number of priorities configured now (the registry may remember a higher one)
-- Reads :ledger (HGETALL) and ZCARD of ra0..ra3 of every priority; a queue whose books are
-- not opened yet (pl_open_books) reports its jobs present as enqueued.
-- Returns {counter, value, ... (the ledger's fields, flat)}, {jobs in state 0, 1, 2, 3}.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
local registered = redis.call('HGET', registry, queue)
if not registered then return pl_no_queue() end
local top = math.max(tonumber(ARGV[3]), tonumber(registered))
local states = pl_present(qprefix, top)
for prio = 1, top do  -- a reserved job counts as PENDING, as every read shows it (S-prefetch)
  local reserved = pl_reserved_shift(qprefix, prio, '0')
  states[1], states[2] = states[1] + reserved, states[2] - reserved
end
local counters = redis.call('HGETALL', qprefix .. ':ledger')
if #counters == 0 then  -- books not opened yet (pl_open_books): the jobs present are enqueued
  counters = {'enqueued', states[1] + states[2] + states[3] + states[4]}
end
return {counters, states}
