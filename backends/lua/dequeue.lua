#!lua
-- dequeue: claim up to `limit` eligible PENDING jobs of one priority (run_after <= now),
-- oldest run_after first, then by id; move them to IN_PROGRESS with the claim.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] priority
-- ARGV[5] limit (>= 1)
-- ARGV[6] claim string
-- ARGV[7] reply budget in bytes ('' = none): claim only the leading jobs whose body lengths,
--         plus ARGV[8] bytes each, add up to at most this (contract.ByteBudget)
-- ARGV[8] bytes a job costs besides its body
-- ARGV[9] the body cap (with a budget: how many bodies one HMGET may read, pl_fitting_bodies)
-- ARGV[10] hold ms ('' = a dequeue): a prefetch reserves the jobs until now + hold (:rsv
--         score) instead of giving them an updated_at index entry (ua1)
-- Reads ra0 (lex range up to now) and the :b/:m columns of the claimed ids (HMGET; with a
-- budget, bodies in chunks that fit it); writes ra0 -> ra1 (same member), ua1 score now, meta
-- {s=1, ua=now, cl} (one HSET).
-- Ledger (:ledger): 'dequeued' += jobs claimed by a dequeue (a prefetch's count when handed out).
-- Returns 4 values per job: id19, body, attempts allowed, attempts remaining.
-- (Dry runs use page.lua, which writes nothing.)
local registry, queue, qprefix, prio = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local limit = tonumber(ARGV[5])
if limit < 1 then return {} end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local pending = pl_ra_index(qprefix, prio, '0')
local members = redis.call('ZRANGEBYLEX', pending, '-', '(' .. pl_ra_text(now) .. ';',
  'LIMIT', 0, limit)
-- The claimed members are ranks 0..n-1 of ra0 (one score, byte order): remove them with one
-- ZREMRANGEBYRANK and add them to the IN_PROGRESS indexes in chunked ZADDs.
local ra_args, ua_args = {}, {}
local ids = {}
for i, member in ipairs(members) do ids[i] = pl_member_id(member) end
local bkey, mkey = pl_job_keys(qprefix, prio)
local bodies
if ARGV[7] == '' then
  bodies = pl_hmget(bkey, ids)
else
  bodies = pl_fitting_bodies(bkey, ids, tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]))
  for i = #ids, #bodies + 1, -1 do
    ids[i], members[i] = nil, nil
  end
end
local metas = pl_hmget(mkey, ids)
local claim = ARGV[6]
local ua_key, ua_score = pl_ua_index(qprefix, prio, '1'), now
local reserving = ARGV[10] and ARGV[10] ~= ''
if reserving then
  ua_key, ua_score = pl_rsv_index(qprefix, prio), now + tonumber(ARGV[10])
end
local out, claimed, new_meta = {}, {}, {}
for i, id19 in ipairs(ids) do
  local s, aa, ar, ca, ra, ua, cl = pl_meta_parse(metas[i])
  if s then
    ra_args[#ra_args + 1] = 0
    ra_args[#ra_args + 1] = members[i]
    ua_args[#ua_args + 1] = ua_score
    ua_args[#ua_args + 1] = id19
    claimed[#claimed + 1] = id19
    -- a prefetch keeps updated_at: reads show a reserved job as it was (S-prefetch)
    new_meta[id19] = pl_meta('1', aa, ar, ca, ra, reserving and ua or now_text, claim)
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = id19, bodies[i] or '', aa, ar
  end
end
if #members > 0 then redis.call('ZREMRANGEBYRANK', pending, 0, #members - 1) end
pl_chunked('ZADD', pl_ra_index(qprefix, prio, '1'), ra_args)
pl_chunked('ZADD', ua_key, ua_args)
pl_hset_fields(mkey, claimed, new_meta)
if not reserving then pl_book(qprefix, 'dequeued', #claimed) end  -- a reservation: at hand-out
return out
