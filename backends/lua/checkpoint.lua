#!lua
-- checkpoint: update IN_PROGRESS jobs whose claim matches; others no-op.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] custom status cap in characters
-- ARGV[5] number of checkpoints n, then 10 values each from ARGV[6]:
--         priority, id19, claim mode ('1' exact / '0' source), claim or source,
--         new body, new-body flag ('1' = replace the body with the previous value),
--         move to pending ('1'/'0'), run_after ms ('' = now), attempts allowed ('' = keep),
--         status to prepend ('' = none)
-- Effects: run_after = given or now; updated_at = now (extends the claim); body, attempts
-- (allowed = remaining) and prepended status (first `cap` characters kept) when given;
-- move to pending: ra1/ua1 -> ra0, claim cleared; else stays in ra1 (re-keyed) / ua1.
-- Returns how many checkpoints applied.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local cap = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local applied = 0
for i = 0, n - 1 do
  local base = 6 + i * 10
  local prio, id19 = ARGV[base], ARGV[base + 1]
  local key = pl_job_key(qprefix, prio, id19)
  local v = redis.call('HMGET', key, 's', 'cl', 'ra', 'cs')
  if v[1] == '1' and pl_claim_ok(v[2], ARGV[base + 2], ARGV[base + 3]) then
    local ra = now
    if ARGV[base + 7] ~= '' then ra = pl_clamp_ra(tonumber(ARGV[base + 7])) end
    pl_unindex(qprefix, prio, '1', pl_member(tonumber(v[3]), id19), id19)
    if ARGV[base + 6] == '1' then
      pl_index(qprefix, prio, '0', pl_member(ra, id19), id19, now)
      redis.call('HSET', key, 's', '0')
      redis.call('HDEL', key, 'cl')
    else
      pl_index(qprefix, prio, '1', pl_member(ra, id19), id19, now)
    end
    redis.call('HSET', key, 'ra', pl_int(ra), 'ua', now_text)
    if ARGV[base + 5] == '1' then redis.call('HSET', key, 'b', ARGV[base + 4]) end
    if ARGV[base + 8] ~= '' then
      redis.call('HSET', key, 'aa', ARGV[base + 8], 'ar', ARGV[base + 8])
    end
    if ARGV[base + 9] ~= '' then
      redis.call('HSET', key, 'cs', pl_keep_first_chars(ARGV[base + 9] .. (v[4] or ''), cap))
    end
    applied = applied + 1
  end
end
return applied
