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
-- A group is acks sharing everything but the id (pinlater/storage/acks.py group_acks, which
-- keeps every job's acks in request order), so a batch of 100 acks is a handful of arguments,
-- not 700 small ones.
-- Success: ra1/ua1 -> ra2/ua2 (ua = now), status appended, claim kept. A reserved job
-- (prefetched, in :rsv instead of ua1) is acked alike and leaves :rsv.
-- Failure with attempts remaining > 1: -> ra0 with run_after = now + delay, remaining - 1,
--   claim cleared; else -> ra3/ua3 with remaining 0. Status appended, updated_at = now.
-- Each group's metas are read with one HMGET (statuses too when it appends one) and kept in a
-- script-local cache that later acks read, so a repeated id sees its first ack applied; the
-- changed metas and statuses are written at the end with one HSET per column, and the index
-- moves with variadic ZREM/ZADD (an ack only ever leaves IN_PROGRESS, so no job is both
-- removed from and added to the same index).
-- Ledger (:ledger): 'succeeded', 'failed' (none left) and 'retried' (back to PENDING), and
-- 'dequeued' for an acked job that was reserved (the ack hands it out, S-reserved-ack).
-- Returns how many acks applied.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local cap = tonumber(ARGV[4])
local groups = tonumber(ARGV[5])
local moves = pl_index_moves(qprefix)
local applied = 0
local booked = {succeeded = 0, failed = 0, retried = 0, dequeued = 0}  -- the ledger's counts
local per_prio = {}  -- prio -> {meta = {id19 -> text}, cs = {id19 -> text}, changed..., order}

local function column(prio)
  local col = per_prio[prio]
  if not col then
    col = {meta = {}, cs = {}, m_order = {}, m_dirty = {}, c_order = {}, c_dirty = {}}
    col.bkey, col.mkey, col.ckey = pl_job_keys(qprefix, prio)
    per_prio[prio] = col
  end
  return col
end

-- Fill the cache with the metas (and, when `statuses`, the custom statuses) of `ids` not seen yet.
local function load(col, ids, statuses)
  local want_m, want_c = {}, {}
  for _, id19 in ipairs(ids) do
    if col.meta[id19] == nil then want_m[#want_m + 1] = id19; col.meta[id19] = false end
    if statuses and col.cs[id19] == nil then want_c[#want_c + 1] = id19; col.cs[id19] = false end
  end
  if #want_m > 0 then
    local got = pl_hmget(col.mkey, want_m)
    for i, id19 in ipairs(want_m) do col.meta[id19] = got[i] end
  end
  if #want_c > 0 then
    local got = pl_hmget(col.ckey, want_c)
    for i, id19 in ipairs(want_c) do col.cs[id19] = got[i] or '' end
  end
end

local function set_meta(col, id19, text)
  col.meta[id19] = text
  if not col.m_dirty[id19] then col.m_dirty[id19] = true; col.m_order[#col.m_order + 1] = id19 end
end

local function set_status(col, id19, text)
  col.cs[id19] = text
  if not col.c_dirty[id19] then col.c_dirty[id19] = true; col.c_order[#col.c_order + 1] = id19 end
end

for g = 0, groups - 1 do
  local base = 6 + g * 7
  local kind, prio, mode, match = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  local status, delay, packed = ARGV[base + 4], tonumber(ARGV[base + 5]), ARGV[base + 6]
  local ids = {}
  for at = 1, #packed, 19 do ids[#ids + 1] = string.sub(packed, at, at + 18) end
  local col = column(prio)
  load(col, ids, status ~= '')
  -- this group's index argument lists, looked up once (not per job)
  local ra1_rem = pl_move_args(moves, 'rem', pl_ra_index(qprefix, prio, '1'))
  local ua1_rem = pl_move_args(moves, 'rem', pl_ua_index(qprefix, prio, '1'))
  local rsv = pl_rsv_index(qprefix, prio)
  local rsv_rem = pl_move_args(moves, 'rem', rsv)
  local final = kind == 'S' and '2' or '3'
  local ra_final = pl_move_args(moves, 'add', pl_ra_index(qprefix, prio, final))
  local ua_final = pl_move_args(moves, 'add', pl_ua_index(qprefix, prio, final))
  local ra_retry = kind == 'F' and pl_move_args(moves, 'add', pl_ra_index(qprefix, prio, '0'))
  for _, id19 in ipairs(ids) do
    local s, aa, ar, ca, ra, ua, cl = pl_meta_parse(col.meta[id19])
    local reserved = s == '1' and redis.call('ZSCORE', rsv, id19)
    if s == '1' and (pl_claim_ok(cl, mode, match) or (reserved and pl_token_ok(cl, mode, match))) then
      if mode == '1' then cl = match end  -- a reserved job takes its hand-out claim
      if status ~= '' then set_status(col, id19, pl_keep_last_chars(col.cs[id19] .. status, cap)) end
      local member = pl_member(tonumber(ra), id19)
      ra1_rem[#ra1_rem + 1] = member
      ua1_rem[#ua1_rem + 1] = id19
      rsv_rem[#rsv_rem + 1] = id19  -- a reserved job (hand-out not written yet) acked
      -- is handed out by the ack: counted as dequeued then (S-reserved-ack)
      if reserved then booked.dequeued = booked.dequeued + 1 end
      if kind == 'F' and tonumber(ar) > 1 then
        local new_ra = pl_clamp_ra(now + delay)
        local n = #ra_retry
        ra_retry[n + 1], ra_retry[n + 2] = 0, pl_member(new_ra, id19)
        set_meta(col, id19, pl_meta('0', aa, pl_int(tonumber(ar) - 1), ca, pl_int(new_ra),
          now_text, ''))
        booked.retried = booked.retried + 1
      else
        local n = #ra_final
        ra_final[n + 1], ra_final[n + 2] = 0, member
        n = #ua_final
        ua_final[n + 1], ua_final[n + 2] = now, id19
        if kind == 'S' then
          set_meta(col, id19, pl_meta('2', aa, ar, ca, ra, now_text, cl))
          booked.succeeded = booked.succeeded + 1
        else
          set_meta(col, id19, pl_meta('3', aa, '0', ca, ra, now_text, cl))
          booked.failed = booked.failed + 1
        end
      end
      applied = applied + 1
    end
  end
end
for _, col in pairs(per_prio) do
  pl_hset_fields(col.mkey, col.m_order, col.meta)
  local keep, drop = {}, {}
  for _, id19 in ipairs(col.c_order) do
    if col.cs[id19] == '' then drop[#drop + 1] = id19 else keep[#keep + 1] = id19 end
  end
  pl_hset_fields(col.ckey, keep, col.cs)
  if #drop > 0 then pl_chunked('HDEL', col.ckey, drop) end
end
pl_apply_moves(moves)
pl_book(qprefix, 'succeeded', booked.succeeded)
pl_book(qprefix, 'failed', booked.failed)
pl_book(qprefix, 'retried', booked.retried)
pl_book(qprefix, 'dequeued', booked.dequeued)
return applied
