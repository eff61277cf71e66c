-- delete_jobs: delete up to `limit` jobs of one state and priority, oldest run_after first, or
-- exactly the listed ones (body-filtered deletes: the caller pages with page.lua, filters in
-- Python and lists the matches; a listed job that left the state meanwhile is skipped).
-- (No shebang on purpose: legacy scripts still run when Redis is over maxmemory, and this one
-- only deletes.)
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] priority
-- ARGV[4] state '0'..'3'
-- ARGV[5] limit (>= 1)
-- ARGV[6] number of listed ids n (0 = take the first `limit` of ra<state>), then the id19s
-- Deletes hashes and their ra/ua index entries. Returns how many jobs were deleted.
local registry, queue, qprefix, prio, state = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local limit = tonumber(ARGV[5])
if limit < 1 then return 0 end
local n = tonumber(ARGV[6])
local deleted = 0
if n == 0 then
  local members = redis.call('ZRANGE', pl_ra_index(qprefix, prio, state), 0, limit - 1)
  for _, member in ipairs(members) do
    local id19 = pl_member_id(member)
    pl_unindex(qprefix, prio, state, member, id19)
    redis.call('DEL', pl_job_key(qprefix, prio, id19))
  end
  return #members
end
for i = 1, math.min(n, limit) do
  local id19 = ARGV[6 + i]
  local v = redis.call('HMGET', pl_job_key(qprefix, prio, id19), 's', 'ra')
  if v[1] == state then
    pl_delete_job(qprefix, prio, id19, state, v[2])
    deleted = deleted + 1
  end
end
return deleted
