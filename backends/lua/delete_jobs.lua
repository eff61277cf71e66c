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
-- Deletes the jobs' column fields and ra/ua index entries, then adds them to the ledger's
-- 'deleted' (:ledger). Returns how many were deleted.
local registry, queue, qprefix, prio, state = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local limit = tonumber(ARGV[5])
if limit < 1 then return 0 end
local n = tonumber(ARGV[6])
local deleted = 0
if n == 0 then
  local index = pl_ra_index(qprefix, prio, state)
  local members = redis.call('ZRANGE', index, 0, limit - 1)
  if #members == 0 then return 0 end
  local ids = {}
  for i, member in ipairs(members) do ids[i] = pl_member_id(member) end
  redis.call('ZREMRANGEBYRANK', index, 0, #members - 1)
  if state ~= '0' then pl_chunked('ZREM', pl_ua_index(qprefix, prio, state), ids) end
  if state == '1' then pl_chunked('ZREM', pl_rsv_index(qprefix, prio), ids) end
  pl_drop_columns(qprefix, prio, ids)
  pl_book(qprefix, 'deleted', #members)
  return #members
end
local _, mkey = pl_job_keys(qprefix, prio)
for i = 1, math.min(n, limit) do
  local id19 = ARGV[6 + i]
  local s, _, _, _, ra = pl_meta_parse(redis.call('HGET', mkey, id19))
  if s == state then
    pl_delete_job(qprefix, prio, id19, state, ra)
    deleted = deleted + 1
  end
end
pl_book(qprefix, 'deleted', deleted)
return deleted
