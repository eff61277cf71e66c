#!lua
-- reservations: end reservations of a prefetching broker (semantics.md S-hand-out, S-release):
-- hand them out (ordinary claims from now) or release them (back to PENDING, nothing used).
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] priority
-- ARGV[5] 'H' hand out or 'R' release
-- ARGV[6] hand out: the new claim ('' keeps the prefetch claim)
-- ARGV[7..] pairs: id19, the claim it was prefetched under
-- A job is ended only while it is reserved (in :rsv, IN_PROGRESS) under that exact claim;
-- others are left alone. Hand out: :rsv -> ua1 (score now), meta {ua=now, cl=new claim}.
-- Release: as pl_return_reserved (ra1 -> ra0, same member). Ledger: a hand-out counts
-- 'dequeued' (the prefetch did not), a release nothing. Returns how many jobs were ended.
local registry, queue, qprefix, prio = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local hand_out, new_claim = ARGV[5] == 'H', ARGV[6]
local rsv = pl_rsv_index(qprefix, prio)
local ids = {}
for i = 7, #ARGV - 1, 2 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return 0 end
local _, mkey = pl_job_keys(qprefix, prio)
local metas = pl_hmget(mkey, ids)
local ended, order, new_metas, ua_args, rem = {}, {}, {}, {}, {}
for i, id19 in ipairs(ids) do
  local s, aa, ar, ca, ra, ua, cl = pl_meta_parse(metas[i])
  local held = ARGV[6 + 2 * i]
  if s == '1' and cl == held and not new_metas[id19] and redis.call('ZSCORE', rsv, id19) then
    if hand_out then
      local claim = cl
      if new_claim ~= '' then claim = new_claim end
      order[#order + 1] = id19
      new_metas[id19] = pl_meta('1', aa, ar, ca, ra, now_text, claim)
      ua_args[#ua_args + 1] = now
      ua_args[#ua_args + 1] = id19
      rem[#rem + 1] = id19
    else
      new_metas[id19] = true
      ended[#ended + 1] = {id19, aa, ar, ca, ra, ua}
    end
  end
end
if hand_out then
  pl_chunked('ZREM', rsv, rem)
  pl_chunked('ZADD', pl_ua_index(qprefix, prio, '1'), ua_args)
  pl_hset_fields(mkey, order, new_metas)
  pl_book(qprefix, 'dequeued', #order)  -- a reservation counts as dequeued when handed out
  return #order
end
pl_return_reserved(qprefix, prio, now_text, ended)
return #ended
