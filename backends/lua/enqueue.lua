#!lua
-- enqueue: store a batch of new jobs as PENDING, atomically; return their local ids.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] number of jobs n, then 5 values per job from ARGV[5]:
--         priority, run_after ms ('' = now), attempts allowed, custom status (already
--         truncated by the caller), body (bytes)
-- Writes: seq INCRBY per priority (pl:..:p<prio>:seq); per job the fields id19 of the column
--   hashes :b (body), :m (meta '0|aa|aa|now|ra|now|') and :c (status, when non-empty), and
--   the member '<ra16>:<id19>' of ra0; one variadic HSET per hash and priority.
-- Returns the ids as decimal strings. Errors (before writing anything) if the queue is not
-- registered or an id would pass 2^53.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local now = pl_now(ARGV[3])
local n = tonumber(ARGV[4])

-- Ids are taken per priority with one INCRBY (the batch is atomic, so they are exactly the ids
-- one INCR per job would give) and the index entries added with chunked variadic ZADDs.
local per_prio = {}
for i = 0, n - 1 do
  local prio = ARGV[5 + i * 5]
  per_prio[prio] = (per_prio[prio] or 0) + 1
end
local next_id = {}
for prio, count in pairs(per_prio) do
  local cur = tonumber(redis.call('GET', pl_prio_prefix(qprefix, prio) .. ':seq') or '0')
  if cur + count > PL_MAX_ID then
    return redis.error_reply('PLIDRANGE local ids of priority ' .. prio .. ' exhausted')
  end
  next_id[prio] = cur + 1
end
for prio, count in pairs(per_prio) do
  redis.call('INCRBY', pl_prio_prefix(qprefix, prio) .. ':seq', count)
end

local ids = {}
local now_text = pl_int(now)
local moves = pl_index_moves(qprefix)
local columns = {}  -- prio -> {order = {id19...}, b = {}, m = {}, c_order = {}, c = {}}
for i = 0, n - 1 do
  local base = 5 + i * 5
  local prio = ARGV[base]
  local ra = now
  if ARGV[base + 1] ~= '' then ra = pl_clamp_ra(tonumber(ARGV[base + 1])) end
  local id = next_id[prio]
  next_id[prio] = id + 1
  local id19 = string.format('%019d', id)
  local col = columns[prio]
  if not col then
    col = {order = {}, b = {}, m = {}, c_order = {}, c = {}}
    columns[prio] = col
  end
  col.order[#col.order + 1] = id19
  col.b[id19] = ARGV[base + 4]
  col.m[id19] = pl_meta('0', ARGV[base + 2], ARGV[base + 2], now_text, pl_int(ra), now_text, '')
  if ARGV[base + 3] ~= '' then
    col.c_order[#col.c_order + 1] = id19
    col.c[id19] = ARGV[base + 3]
  end
  pl_move_index(moves, prio, '0', pl_member(ra, id19), id19, now)
  ids[#ids + 1] = pl_int(id)
end
for prio, col in pairs(columns) do
  local bkey, mkey, ckey = pl_job_keys(qprefix, prio)
  pl_hset_fields(bkey, col.order, col.b)
  pl_hset_fields(mkey, col.order, col.m)
  pl_hset_fields(ckey, col.c_order, col.c)
end
pl_apply_moves(moves)
return ids
