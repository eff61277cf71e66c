#!lua
-- reclaim: IN_PROGRESS jobs of one priority whose updated_at is older than the claim timeout
-- go back to PENDING with one attempt used (run_after = now, claim cleared), or to FAILED
-- (remaining 0) when none is left.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] priority
-- ARGV[5] claim timeout ms
-- ARGV[6] limit (>= 1)
-- First the reservations (:rsv) whose deadline passed (a dead broker's prefetched jobs): back
-- to PENDING with nothing used, as a release. Then ua1 (updated_at < now - timeout; reserved
-- jobs have no ua1 entry): ra1/ua1 -> ra0 or ra3/ua3 and the metas; `limit` jobs in all.
-- Ledger (:ledger): 'reclaimed' += claims moved (not reservations).
-- Returns {retried, failed, released}.
local registry, queue, qprefix, prio = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local limit = tonumber(ARGV[6])
if limit < 1 then return {0, 0, 0} end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local _, mkey = pl_job_keys(qprefix, prio)
-- expired reservations first: back to PENDING with nothing used (not booked as reclaimed)
local rsv = pl_rsv_index(qprefix, prio)
local expired = redis.call('ZRANGEBYSCORE', rsv, '-inf', '(' .. now_text, 'LIMIT', 0, limit)
local back = {}
for _, id19 in ipairs(expired) do
  local s, aa, ar, ca, ra, ua = pl_meta_parse(redis.call('HGET', mkey, id19))
  if s == '1' then
    back[#back + 1] = {id19, aa, ar, ca, ra, ua}
  else
    redis.call('ZREM', rsv, id19)  -- an entry without a reserved job
  end
end
pl_return_reserved(qprefix, prio, now_text, back)
local released = #back
limit = limit - #expired
if limit < 1 then return {0, 0, released} end
local ids = redis.call('ZRANGEBYSCORE', pl_ua_index(qprefix, prio, '1'), '-inf',
  '(' .. pl_int(now - tonumber(ARGV[5])), 'LIMIT', 0, limit)
local retried, failed = 0, 0
for _, id19 in ipairs(ids) do
  local s, aa, ar, ca, ra, ua, cl = pl_meta_parse(redis.call('HGET', mkey, id19))
  if not s then
    redis.call('ZREM', pl_ua_index(qprefix, prio, '1'), id19)  -- index entry without a job
  else
    local member = pl_member(tonumber(ra), id19)
    pl_unindex(qprefix, prio, '1', member, id19)
    if tonumber(ar) > 1 then
      pl_index(qprefix, prio, '0', pl_member(now, id19), id19, now)
      redis.call('HSET', mkey, id19,
        pl_meta('0', aa, pl_int(tonumber(ar) - 1), ca, now_text, now_text, ''))
      retried = retried + 1
    else
      pl_index(qprefix, prio, '3', member, id19, now)
      redis.call('HSET', mkey, id19, pl_meta('3', aa, '0', ca, ra, now_text, cl))
      failed = failed + 1
    end
  end
end
pl_book(qprefix, 'reclaimed', retried + failed)
return {retried, failed, released}
