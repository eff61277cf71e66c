#!lua
-- dequeue_fifo: a FIFO queue's dequeue (Shard.dequeue_fifo, docs/semantics.md `F-...`): count
-- the queue's IN_PROGRESS jobs (ZCARD of ra1 per priority), then claim up to min(limit, cap -
-- that count) heads, priority 1 first. A priority's heads are its PENDING jobs in id (enqueue)
-- order, found by walking ids up from the priority's FIFO mark :p<n>:fh to its :seq (HMGET of
-- the meta in chunks of 100): every id below the mark is a job that is gone, SUCCEEDED or
-- FAILED (retry_failed.lua lowers the mark when it makes such a job PENDING again). The first
-- PENDING job not due ends the priority. A claim moves the mark past the finished prefix of
-- what it walked; a priority's first call sets it to its lowest PENDING or IN_PROGRESS id (one
-- read of ra0 and ra1). At most WALK ids are walked per priority and call (a walk cut short
-- hands out what it found; the next call goes on from the mark). Non-FIFO queues never have a
-- mark and no other script reads one.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] highest priority configured
-- ARGV[5] limit (>= 1)
-- ARGV[6] claim string ('' = dry run: nothing is written)
-- ARGV[7] in-flight cap
-- ARGV[8] reply budget in bytes ('' = none), ARGV[9] bytes a job costs besides its body,
--         ARGV[10] the body cap (as dequeue.lua); a head that does not fit ends the call
-- Writes (claims): ra0 -> ra1 (same member), ua1 score now, meta {s=1, ua=now, cl}, :fh;
-- ledger 'dequeued' += jobs claimed.
-- Returns 5 values per job: priority, id19, body, attempts allowed, attempts remaining.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local claim = ARGV[6]
local dry = claim == ''
if not dry then pl_open_books(registry, queue, qprefix) end
local top = tonumber(ARGV[4])
local busy = 0
for prio = 1, top do busy = busy + redis.call('ZCARD', pl_ra_index(qprefix, prio, '1')) end
local room = math.min(tonumber(ARGV[5]), tonumber(ARGV[7]) - busy)
if room < 1 then return {} end
local now = pl_now(ARGV[3])
local now_text = pl_int(now)
local budget = nil
if ARGV[8] ~= '' then budget = tonumber(ARGV[8]) end
local per_job, body_cap = tonumber(ARGV[9]), tonumber(ARGV[10])
local WALK = 1000

-- The lowest PENDING or IN_PROGRESS id of a priority (nil when none).
local function lowest_open(prio)
  local low = nil
  for _, st in ipairs({'0', '1'}) do
    for _, member in ipairs(redis.call('ZRANGE', pl_ra_index(qprefix, prio, st), 0, -1)) do
      local id = tonumber(pl_member_id(member))
      if low == nil or id < low then low = id end
    end
  end
  return low
end

-- Up to `want` due heads of one priority: their id19s and metas, and the new mark.
local function heads(prio, want)
  local _, mkey = pl_job_keys(qprefix, prio)
  local seq = tonumber(redis.call('GET', pl_prio_prefix(qprefix, prio) .. ':seq') or '0')
  local stored = redis.call('GET', pl_prio_prefix(qprefix, prio) .. ':fh')
  local mark = stored and tonumber(stored) or (lowest_open(prio) or (seq + 1))
  local ids, metas, finished, done = {}, {}, true, false
  local id, stop_at = mark, mark + WALK
  while not done and id <= seq and id < stop_at do
    local last = math.min(seq, id + 99)
    local chunk = {}
    for i = id, last do chunk[#chunk + 1] = string.format('%019d', i) end
    local got = redis.call('HMGET', mkey, unpack(chunk))
    for i, id19 in ipairs(chunk) do
      local s, _, _, _, ra = pl_meta_parse(got[i])
      if s == '0' then
        finished = false
        if #ids >= want or tonumber(ra) > now then
          done = true
          break
        end
        ids[#ids + 1], metas[#metas + 1] = id19, got[i]
      elseif s == '1' then
        finished = false
      elseif finished then
        mark = id + i
      end
    end
    id = last + 1
  end
  if finished and not done then mark = id end
  return ids, metas, mark, stored
end

local out = {}
for prio = 1, top do
  if room < 1 then break end
  local ids, metas, mark, stored = heads(prio, room)
  local bkey, mkey = pl_job_keys(qprefix, prio)
  local bodies
  if budget == nil then
    bodies = pl_hmget(bkey, ids)
  else
    bodies = pl_fitting_bodies(bkey, ids, budget, per_job, body_cap)
  end
  local full = #bodies < #ids
  local moves, claimed, new_meta = pl_index_moves(qprefix), {}, {}
  for i = 1, #bodies do
    local id19 = ids[i]
    local s, aa, ar, ca, ra = pl_meta_parse(metas[i])
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = prio, id19, bodies[i] or '', aa, ar
    if budget ~= nil then budget = budget - #(bodies[i] or '') - per_job end
    if not dry then
      local member = pl_member(tonumber(ra), id19)
      pl_move_unindex(moves, prio, '0', member, id19)
      pl_move_index(moves, prio, '1', member, id19, now)
      claimed[#claimed + 1] = id19
      new_meta[id19] = pl_meta('1', aa, ar, ca, ra, now_text, claim)
    end
  end
  if not dry then
    pl_apply_moves(moves)
    pl_hset_fields(mkey, claimed, new_meta)
    if stored == false or tonumber(stored) ~= mark then
      redis.call('SET', pl_prio_prefix(qprefix, prio) .. ':fh', pl_int(mark))
    end
  end
  room = room - #bodies
  if full then break end
end
if not dry then pl_book(qprefix, 'dequeued', #out / 5) end
return out
