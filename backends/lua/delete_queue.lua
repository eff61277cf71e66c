-- delete_queue: one bounded step of removing a queue and everything in it.
-- (No shebang on purpose: legacy scripts run when Redis is over maxmemory, and this one only
-- deletes, so it can free memory. It writes nothing that grows.)
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] highest priority to clear (max of configured and registered, computed by the caller
--         from this script's first return value)
-- ARGV[4] most jobs to delete in this step
-- ARGV[5] '1' on the first step (unregisters the queue); '0' on later steps, which stop at once
--         if the queue was created again meanwhile
-- Per priority and state: ra<state> index, ua<state> index, job hashes; per priority: seq.
-- Returns {highest registered priority (0 if none), 1 when nothing is left, else 0}.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
local budget = tonumber(ARGV[4])
local registered = tonumber(redis.call('HGET', registry, queue) or '0')
if ARGV[5] == '1' then
  redis.call('HDEL', registry, queue)
elseif registered > 0 then
  return {registered, 1}
end
local top = math.max(tonumber(ARGV[3]), registered)
for prio = 1, top do
  for state = 0, 3 do
    local st = tostring(state)
    local ra_key = pl_ra_index(qprefix, prio, st)
    if budget <= 0 then return {registered, 0} end
    local members = redis.call('ZRANGE', ra_key, 0, budget - 1)
    for _, member in ipairs(members) do
      redis.call('DEL', pl_job_key(qprefix, prio, pl_member_id(member)))
    end
    if #members > 0 then
      redis.call('ZREMRANGEBYRANK', ra_key, 0, #members - 1)
      budget = budget - #members
    end
    if redis.call('EXISTS', ra_key) == 1 then return {registered, 0} end
    redis.call('DEL', pl_ua_index(qprefix, prio, st))
  end
  redis.call('DEL', pl_prio_prefix(qprefix, prio) .. ':seq')
end
return {registered, 1}
