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
-- A reserved job (in :rsv) is PENDING here, as to reads (S-prefetch): a delete of PENDING jobs
-- takes the reserved ones first, one of IN_PROGRESS jobs leaves them.
-- Deletes the jobs' column fields and ra/ua index entries, then adds them to the ledger's
-- 'deleted' (:ledger). Returns how many were deleted.
local registry, queue, qprefix, prio, state = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local limit = tonumber(ARGV[5])
if limit < 1 then return 0 end
local n = tonumber(ARGV[6])
local deleted = 0
local _, mkey = pl_job_keys(qprefix, prio)
local rsv = pl_rsv_index(qprefix, prio)
-- a reserved job (IN_PROGRESS in :rsv) is PENDING to reads and deletes (S-prefetch)
local function shown(s, id19)
  if s == '1' and redis.call('ZSCORE', rsv, id19) then return '0' end
  return s
end
local function delete_one(id19)
  local s, _, _, _, ra = pl_meta_parse(redis.call('HGET', mkey, id19))
  if s and shown(s, id19) == state then
    pl_delete_job(qprefix, prio, id19, s, ra)
    deleted = deleted + 1
  elseif not s then
    redis.call('ZREM', rsv, id19)  -- an entry without a job
  end
end
if n == 0 then
  if state == '0' then  -- the reserved jobs first (a prefetch took the oldest due)
    for _, id19 in ipairs(redis.call('ZRANGE', rsv, 0, limit - 1)) do delete_one(id19) end
    limit = limit - deleted
    if limit < 1 then
      pl_book(qprefix, 'deleted', deleted)
      return deleted
    end
  end
  local index = pl_ra_index(qprefix, prio, state)
  local reach = limit
  if state == '1' then reach = limit + redis.call('ZCARD', rsv) end
  local ids = {}
  for _, member in ipairs(redis.call('ZRANGE', index, 0, reach - 1)) do
    local id19 = pl_member_id(member)
    if #ids < limit and not (state == '1' and redis.call('ZSCORE', rsv, id19)) then
      ids[#ids + 1] = id19
      redis.call('ZREM', index, member)
    end
  end
  if #ids > 0 then
    if state ~= '0' then pl_chunked('ZREM', pl_ua_index(qprefix, prio, state), ids) end
    pl_drop_columns(qprefix, prio, ids)
  end
  deleted = deleted + #ids
  pl_book(qprefix, 'deleted', deleted)
  return deleted
end
for i = 1, math.min(n, limit) do delete_one(ARGV[6 + i]) end
pl_book(qprefix, 'deleted', deleted)
return deleted
