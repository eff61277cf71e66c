#!lua
-- retry_failed: move up to `limit` FAILED jobs of one priority (oldest run_after first, then
-- id, as the SQL backends do) back to PENDING.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] priority
-- ARGV[5] attempts remaining to set (>= 1)
-- ARGV[6] run_after ms ('' = now)
-- ARGV[7] limit (>= 1)
-- Reads ra3; writes ra3/ua3 -> ra0, meta {s=0, ar, ra, ua=now}, claim cleared.
-- A FIFO mark (:p<n>:fh, dequeue_fifo.lua) above a job moved is lowered to its id.
-- Returns how many jobs moved.
local registry, queue, qprefix, prio = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local limit = tonumber(ARGV[7])
if limit < 1 then return 0 end
local now = pl_now(ARGV[3])
local ra = now
if ARGV[6] ~= '' then ra = pl_clamp_ra(tonumber(ARGV[6])) end
local members = redis.call('ZRANGE', pl_ra_index(qprefix, prio, '3'), 0, limit - 1)
local _, mkey = pl_job_keys(qprefix, prio)
local now_text, ra_text = pl_int(now), pl_int(ra)
for _, member in ipairs(members) do
  local id19 = pl_member_id(member)
  local _, aa, _, ca = pl_meta_parse(redis.call('HGET', mkey, id19))
  pl_unindex(qprefix, prio, '3', member, id19)
  if aa then
    pl_index(qprefix, prio, '0', pl_member(ra, id19), id19, now)
    redis.call('HSET', mkey, id19, pl_meta('0', aa, ARGV[5], ca, ra_text, now_text, ''))
  end
end
local mark_key = pl_prio_prefix(qprefix, prio) .. ':fh'
local mark = redis.call('GET', mark_key)
if mark then
  local low = tonumber(mark)
  for _, member in ipairs(members) do low = math.min(low, tonumber(pl_member_id(member))) end
  if low < tonumber(mark) then redis.call('SET', mark_key, pl_int(low)) end
end
return #members
