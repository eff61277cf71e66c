#!lua
-- ack: apply success and failure acks of IN_PROGRESS jobs whose claim matches; others no-op.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] custom status cap in characters
-- ARGV[5] number of groups g, then 7 values per group from ARGV[6]:
--         kind ('S' success / 'F' failure), priority, claim mode ('1' exact claim,
--         '0' source part), claim or source, status to append, retry delay ms (>= 0),
--         the group's job ids as concatenated 19-character id19 strings.
-- A group is a run of consecutive acks sharing everything but the id (the caller keeps the
-- request's order), so a batch of 100 acks is a handful of arguments, not 700 small ones.
-- Success: ra1/ua1 -> ra2/ua2 (ua = now), status appended, claim kept.
-- Failure with attempts remaining > 1: -> ra0 with run_after = now + delay, remaining - 1,
--   claim cleared; else -> ra3/ua3 with remaining 0. Status appended, updated_at = now.
-- Job hashes are updated in order (a repeated id sees its first ack applied); the index moves
-- are collected and applied at the end with variadic ZREM/ZADD (an ack only ever leaves
-- IN_PROGRESS, so no job is both removed from and added to the same index).
-- Returns how many acks applied.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local cap = tonumber(ARGV[4])
local groups = tonumber(ARGV[5])
local moves = pl_index_moves(qprefix)
local applied = 0
for g = 0, groups - 1 do
  local base = 6 + g * 7
  local kind, prio, mode, match = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  local status, delay, ids = ARGV[base + 4], tonumber(ARGV[base + 5]), ARGV[base + 6]
  for at = 1, #ids, 19 do
    local id19 = string.sub(ids, at, at + 18)
    local key = pl_job_key(qprefix, prio, id19)
    local v = redis.call('HMGET', key, 's', 'cl', 'ra', 'ar', 'cs')
    if v[1] == '1' and pl_claim_ok(v[2], mode, match) then
      local cs = pl_keep_last_chars((v[5] or '') .. status, cap)
      local member = pl_member(tonumber(v[3]), id19)
      pl_move_unindex(moves, prio, '1', member, id19)
      if kind == 'S' then
        pl_move_index(moves, prio, '2', member, id19, now)
        redis.call('HSET', key, 's', '2', 'ua', now_text, 'cs', cs)
      elseif tonumber(v[4]) > 1 then
        local ra = pl_clamp_ra(now + delay)
        pl_move_index(moves, prio, '0', pl_member(ra, id19), id19, now)
        redis.call('HSET', key, 's', '0', 'ar', pl_int(tonumber(v[4]) - 1), 'ra', pl_int(ra),
          'ua', now_text, 'cs', cs)
        redis.call('HDEL', key, 'cl')
      else
        pl_move_index(moves, prio, '3', member, id19, now)
        redis.call('HSET', key, 's', '3', 'ar', '0', 'ua', now_text, 'cs', cs)
      end
      applied = applied + 1
    end
  end
end
pl_apply_moves(moves)
return applied
