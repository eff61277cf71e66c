#!lua
-- ack: apply success and failure acks of IN_PROGRESS jobs whose claim matches; others no-op.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] custom status cap in characters
-- ARGV[5] number of acks n, then 7 values per ack from ARGV[6]:
--         kind ('S' success / 'F' failure), priority, id19, claim mode ('1' exact claim,
--         '0' source part), claim or source, status to append, retry delay ms (>= 0)
-- Success: ra1/ua1 -> ra2/ua2 (ua = now), status appended, claim kept.
-- Failure with attempts remaining > 1: -> ra0 with run_after = now + delay, remaining - 1,
--   claim cleared; else -> ra3/ua3 with remaining 0. Status appended, updated_at = now.
-- Returns how many acks applied.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local cap = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local applied = 0
for i = 0, n - 1 do
  local base = 6 + i * 7
  local kind, prio, id19 = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local key = pl_job_key(qprefix, prio, id19)
  local v = redis.call('HMGET', key, 's', 'cl', 'ra', 'ar', 'cs')
  if v[1] == '1' and pl_claim_ok(v[2], ARGV[base + 3], ARGV[base + 4]) then
    local cs = pl_keep_last_chars((v[5] or '') .. ARGV[base + 5], cap)
    local member = pl_member(tonumber(v[3]), id19)
    pl_unindex(qprefix, prio, '1', member, id19)
    if kind == 'S' then
      pl_index(qprefix, prio, '2', member, id19, now)
      redis.call('HSET', key, 's', '2', 'ua', now_text, 'cs', cs)
    elseif tonumber(v[4]) > 1 then
      local ra = pl_clamp_ra(now + tonumber(ARGV[base + 6]))
      pl_index(qprefix, prio, '0', pl_member(ra, id19), id19, now)
      redis.call('HSET', key, 's', '0', 'ar', pl_int(tonumber(v[4]) - 1), 'ra', pl_int(ra),
        'ua', now_text, 'cs', cs)
      redis.call('HDEL', key, 'cl')
    else
      pl_index(qprefix, prio, '3', member, id19, now)
      redis.call('HSET', key, 's', '3', 'ar', '0', 'ua', now_text, 'cs', cs)
    end
    applied = applied + 1
  end
end
return applied
