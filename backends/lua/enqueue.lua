#!lua
-- enqueue: store a batch of new jobs as PENDING, atomically; return their local ids.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] number of jobs n, then 5 values per job from ARGV[5]:
--         priority, run_after ms ('' = now), attempts allowed, custom status (already
--         truncated by the caller), body (bytes)
-- Writes: seq INCRBY per priority (pl:..:p<prio>:seq); per job hash pl:..:p<prio>:j:<id19>
--   {b, s=0, aa, ar, cs, ca, ra, ua}, member '<ra16>:<id19>' in ra0.
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
for i = 0, n - 1 do
  local base = 5 + i * 5
  local prio = ARGV[base]
  local ra = now
  if ARGV[base + 1] ~= '' then ra = pl_clamp_ra(tonumber(ARGV[base + 1])) end
  local id = next_id[prio]
  next_id[prio] = id + 1
  local id19 = string.format('%019d', id)
  redis.call('HSET', pl_job_key(qprefix, prio, id19),
    'b', ARGV[base + 4], 's', '0', 'aa', ARGV[base + 2], 'ar', ARGV[base + 2],
    'cs', ARGV[base + 3], 'ca', now_text, 'ra', pl_int(ra), 'ua', now_text)
  pl_move_index(moves, prio, '0', pl_member(ra, id19), id19, now)
  ids[#ids + 1] = pl_int(id)
end
pl_apply_moves(moves)
return ids
