-- delete_queue: unregister a queue and remove everything in it, in one atomic step.
-- (No shebang on purpose: legacy scripts run when Redis is over maxmemory, and this one only
-- deletes, so it can free memory.)
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] highest priority configured now (the registry may remember a higher one)
-- The unique keys :uk :ux, the ledger :ledger (a queue created again starts with empty books), and per priority the column hashes :b :m :c, ra0..ra3, ua1..ua3,
-- seq, the FIFO mark fh and the reservations :rsv. The keys are few (3, and 13 per priority, whatever the number of jobs) and UNLINK
-- frees large values in Redis's
-- background thread, so even a queue of millions of jobs blocks Redis only briefly.
-- Returns the number of keys removed.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
local registered = tonumber(redis.call('HGET', registry, queue) or '0')
redis.call('HDEL', registry, queue)
local top = math.max(tonumber(ARGV[3]), registered)
local removed = redis.call('UNLINK', qprefix .. ':uk', qprefix .. ':ux', qprefix .. ':ledger')
for prio = 1, top do
  local bkey, mkey, ckey = pl_job_keys(qprefix, prio)
  local doomed = {bkey, mkey, ckey, pl_prio_prefix(qprefix, prio) .. ':seq',
    pl_prio_prefix(qprefix, prio) .. ':fh', pl_rsv_index(qprefix, prio)}
  for state = 0, 3 do
    local st = tostring(state)
    doomed[#doomed + 1] = pl_ra_index(qprefix, prio, st)
    if state > 0 then doomed[#doomed + 1] = pl_ua_index(qprefix, prio, st) end
  end
  removed = removed + redis.call('UNLINK', unpack(doomed))
end
return removed
