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
-- Reads ra0 (lex range up to now); writes ra0 -> ra1 (same member), ua1 score now, hash
-- {s=1, cl, ua}. Returns 4 values per job: id19, body, attempts allowed, attempts remaining.
-- (Dry runs use page.lua, which writes nothing.)
local registry, queue, qprefix, prio = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local limit = tonumber(ARGV[5])
if limit < 1 then return {} end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local pending = pl_ra_index(qprefix, prio, '0')
local members = redis.call('ZRANGEBYLEX', pending, '-', '(' .. pl_ra_text(now) .. ';',
  'LIMIT', 0, limit)
local out = {}
for _, member in ipairs(members) do
  local id19 = pl_member_id(member)
  local key = pl_job_key(qprefix, prio, id19)
  local v = redis.call('HMGET', key, 'b', 'aa', 'ar')
  redis.call('ZREM', pending, member)
  if v[1] then
    pl_index(qprefix, prio, '1', member, id19, now)
    redis.call('HSET', key, 's', '1', 'cl', ARGV[6], 'ua', now_text)
    out[#out + 1] = id19
    out[#out + 1] = v[1]
    out[#out + 1] = v[2]
    out[#out + 1] = v[3]
  end
end
return out
