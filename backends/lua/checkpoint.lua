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
local applied, handed = 0, 0
for i = 0, n - 1 do
  local base = 6 + i * 10
  local prio, id19 = ARGV[base], ARGV[base + 1]
  local bkey, mkey, ckey = pl_job_keys(qprefix, prio)
  local s, aa, ar, ca, old_ra, ua, cl = pl_meta_parse(redis.call('HGET', mkey, id19))
  local mode, match = ARGV[base + 2], ARGV[base + 3]
  local reserved = s == '1' and redis.call('ZSCORE', pl_rsv_index(qprefix, prio), id19)
  if s == '1' and (pl_claim_ok(cl, mode, match) or (reserved and pl_token_ok(cl, mode, match))) then
    if mode == '1' then cl = match end  -- a reserved job takes its hand-out claim
    local ra = now
    if ARGV[base + 7] ~= '' then ra = pl_clamp_ra(tonumber(ARGV[base + 7])) end
    -- a reserved job checkpointed is handed out by it: counted as dequeued (S-reserved-ack)
    if reserved then handed = handed + 1 end
    pl_unindex(qprefix, prio, '1', pl_member(tonumber(old_ra), id19), id19)
    if ARGV[base + 6] == '1' then
      pl_index(qprefix, prio, '0', pl_member(ra, id19), id19, now)
      s, cl = '0', ''
    else
      pl_index(qprefix, prio, '1', pl_member(ra, id19), id19, now)
    end
    if ARGV[base + 8] ~= '' then aa, ar = ARGV[base + 8], ARGV[base + 8] end
    redis.call('HSET', mkey, id19, pl_meta(s, aa, ar, ca, pl_int(ra), now_text, cl))
    if ARGV[base + 5] == '1' then redis.call('HSET', bkey, id19, ARGV[base + 4]) end
    if ARGV[base + 9] ~= '' then
      local cs = redis.call('HGET', ckey, id19) or ''
      cs = pl_keep_first_chars(ARGV[base + 9] .. cs, cap)
      if cs == '' then redis.call('HDEL', ckey, id19) else redis.call('HSET', ckey, id19, cs) end
    end
    applied = applied + 1
  end
end
pl_book(qprefix, 'dequeued', handed)
return applied
