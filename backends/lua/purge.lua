-- purge: delete up to `limit` jobs of a terminal state whose updated_at is older than the TTL.
-- (No shebang on purpose: legacy scripts still run when Redis is over maxmemory, and this one
-- only deletes, so the janitor can free memory.)
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] priority
-- ARGV[5] state '2' or '3'
-- ARGV[6] ttl ms
-- ARGV[7] limit (>= 1)
-- Reads ua<state> (updated_at < now - ttl); deletes the jobs' column fields and ra/ua entries
-- with variadic calls; the ledger's 'purged' += jobs removed (after the deletes). Returns
-- the count.
local registry, queue, qprefix, prio, state = KEYS[1], ARGV[1], ARGV[2], ARGV[4], ARGV[5]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local limit = tonumber(ARGV[7])
if limit < 1 then return 0 end
local now = pl_now(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', pl_ua_index(qprefix, prio, state), '-inf',
  '(' .. pl_int(now - tonumber(ARGV[6])), 'LIMIT', 0, limit)
local _, mkey = pl_job_keys(qprefix, prio)
local metas = pl_hmget(mkey, ids)
local members = {}
for i, id19 in ipairs(ids) do
  local _, _, _, _, ra = pl_meta_parse(metas[i])
  if ra then members[#members + 1] = pl_member(tonumber(ra), id19) end
end
if #ids > 0 then
  pl_chunked('ZREM', pl_ua_index(qprefix, prio, state), ids)
  pl_drop_columns(qprefix, prio, ids)
end
if #members > 0 then pl_chunked('ZREM', pl_ra_index(qprefix, prio, state), members) end
pl_book(qprefix, 'purged', #members)
return #ids
