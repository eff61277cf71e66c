-- Shared helpers, prepended (after the shebang line) to every script in this directory by
-- backends/redis_scripts.py. Not an operation of its own. Key layout: backends/redis_keys.py.
-- Tokens in double underscores are replaced with Python constants at load time.
--
-- Numbers: Lua 5.1 numbers are doubles; ids and ms times stay exact below 2^53 and are always
-- written with string.format('%d'), never by concatenating a number ('1e+14' otherwise).

local PL_CLAIM_SOURCE_OFFSET = __CLAIM_SOURCE_OFFSET__
local PL_RA_OFFSET = __RA_OFFSET__      -- added to run_after so index members sort as text
local PL_RA_MIN = __RA_MIN__            -- run_after values saturate to [PL_RA_MIN, PL_RA_MAX]
local PL_RA_MAX = __RA_MAX__
local PL_MAX_ID = __MAX_ID__            -- largest local id a Lua double holds exactly
-- arguments per variadic call (even: score/member and field/value pairs never split; keeps
-- unpack() far below Lua's C-stack limit)
local PL_CHUNK = 1000

-- `command key args...` in chunks of at most PL_CHUNK arguments.
local function pl_chunked(command, key, args)
  for first = 1, #args, PL_CHUNK do
    redis.call(command, key, unpack(args, first, math.min(first + PL_CHUNK - 1, #args)))
  end
end

-- Redis's clock in epoch ms plus the shard's clock offset (ARGV, moved by tests/operators).
local function pl_now(offset)
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(offset)
end

local function pl_int(n)
  return string.format('%d', n)
end

local function pl_clamp_ra(ra)
  if ra < PL_RA_MIN then return PL_RA_MIN end
  if ra > PL_RA_MAX then return PL_RA_MAX end
  return ra
end

-- run_after as fixed-width text: index members '<16 digits>:<19-digit id>' sort by
-- (run_after, id) as plain bytes, so ZRANGEBYLEX gives exact cursors and ranges.
local function pl_ra_text(ra)
  return string.format('%016d', ra + PL_RA_OFFSET)
end

local function pl_member(ra, id19)
  return pl_ra_text(ra) .. ':' .. id19
end

local function pl_member_id(member)
  return string.sub(member, 18)
end

local function pl_prio_prefix(qprefix, prio)
  return qprefix .. ':p' .. prio
end

-- The three column hashes of one queue priority: field id19 -> body, -> meta text, -> custom
-- status (present only when non-empty). Many jobs are read or written with one variadic call.
local function pl_job_keys(qprefix, prio)
  local p = qprefix .. ':p' .. prio
  return p .. ':b', p .. ':m', p .. ':c'
end

-- Meta text: 's|aa|ar|ca|ra|ua|cl' (state digit, attempts allowed/remaining, created_at,
-- run_after, updated_at as decimal integers; the claim last, '' when none, so it may hold '|').
local PL_META = '^(%d)|(%-?%d+)|(%-?%d+)|(%-?%d+)|(%-?%d+)|(%-?%d+)|(.*)$'

-- s, aa, ar, ca, ra, ua, cl as strings; nothing for a missing (nil/false) meta.
local function pl_meta_parse(meta)
  if not meta then return nil end
  return string.match(meta, PL_META)
end

-- Arguments must be strings (numbers through pl_int).
local function pl_meta(s, aa, ar, ca, ra, ua, cl)
  return s .. '|' .. aa .. '|' .. ar .. '|' .. ca .. '|' .. ra .. '|' .. ua .. '|' .. cl
end

local function pl_ra_index(qprefix, prio, state)
  return qprefix .. ':p' .. prio .. ':ra' .. state
end

local function pl_ua_index(qprefix, prio, state)
  return qprefix .. ':p' .. prio .. ':ua' .. state
end

-- The reservations of one priority (prefetching broker, semantics.md S-...): ZSET id19 ->
-- deadline ms. A reserved job is IN_PROGRESS (in ra1, its meta's claim the prefetch claim)
-- but has no ua1 entry: the claim timeout does not apply to it, only its deadline.
local function pl_rsv_index(qprefix, prio)
  return qprefix .. ':p' .. prio .. ':rsv'
end

-- What reads add to a state's count of due jobs for the reservations of one priority: reads
-- show a reserved job as PENDING (S-prefetch), and a reserved job is due (it was when taken).
local function pl_reserved_shift(qprefix, prio, state)
  if state ~= '0' and state ~= '1' then return 0 end
  local reserved = redis.call('ZCARD', pl_rsv_index(qprefix, prio))
  if state == '0' then return reserved end
  return -reserved
end

local function pl_queue_exists(registry, queue)
  return redis.call('HEXISTS', registry, queue) == 1
end

local function pl_no_queue()
  return redis.error_reply('PLNOQUEUE queue not registered on this shard')
end

-- mode '1': the stored claim must equal `value`; mode '0': its source part must equal `value`.
local function pl_claim_ok(stored, mode, value)
  if not stored or stored == '' then return false end
  if mode == '1' then return stored == value end
  return string.sub(stored, PL_CLAIM_SOURCE_OFFSET + 1) == value
end

-- What a reserved job (prefetched, its hand-out not written yet) also matches besides
-- pl_claim_ok: an exact claim with the reservation's token, the claim a broker hands it out
-- under (R-broker-claim), so an ack through any server applies before the hand-out is written.
local function pl_token_ok(stored, mode, value)
  local token = PL_CLAIM_SOURCE_OFFSET - 1
  return mode == '1' and #value > token and string.sub(stored, 1, token) == string.sub(value, 1, token)
end

-- Character-aware truncation of UTF-8 text (string.sub counts bytes): a character starts at
-- every byte that is not a continuation byte (0x80-0xBF).
local function pl_keep_last_chars(s, cap)
  if #s <= cap then return s end
  if cap <= 0 then return '' end
  local n = 0
  for i = #s, 1, -1 do
    local b = string.byte(s, i)
    if b < 128 or b >= 192 then
      n = n + 1
      if n == cap then return string.sub(s, i) end
    end
  end
  return s
end

local function pl_keep_first_chars(s, cap)
  if #s <= cap then return s end
  if cap <= 0 then return '' end
  local n = 0
  for i = 1, #s do
    local b = string.byte(s, i)
    if b < 128 or b >= 192 then
      n = n + 1
      if n == cap + 1 then return string.sub(s, 1, i - 1) end
    end
  end
  return s
end

-- Move a job between indexes; `ua` is the new updated_at (ignored for PENDING, which has no
-- updated_at index).
local function pl_unindex(qprefix, prio, state, member, id19)
  redis.call('ZREM', pl_ra_index(qprefix, prio, state), member)
  if state ~= '0' then redis.call('ZREM', pl_ua_index(qprefix, prio, state), id19) end
  if state == '1' then redis.call('ZREM', pl_rsv_index(qprefix, prio), id19) end
end

local function pl_index(qprefix, prio, state, member, id19, ua)
  redis.call('ZADD', pl_ra_index(qprefix, prio, state), 0, member)
  if state ~= '0' then redis.call('ZADD', pl_ua_index(qprefix, prio, state), ua, id19) end
end

-- Remove the column fields (body, meta, status) of the jobs `ids` (their index entries are the
-- caller's).
local function pl_drop_columns(qprefix, prio, ids)
  local bkey, mkey, ckey = pl_job_keys(qprefix, prio)
  pl_chunked('HDEL', bkey, ids)
  pl_chunked('HDEL', mkey, ids)
  pl_chunked('HDEL', ckey, ids)
end

-- Delete one job (column hash fields and index entries) whose state and run_after are `st`, `ra`.
local function pl_delete_job(qprefix, prio, id19, st, ra)
  pl_unindex(qprefix, prio, st, pl_member(tonumber(ra), id19), id19)
  pl_drop_columns(qprefix, prio, {id19})
end

-- Append one job record (12 entries: prio, id19, s, aa, ar, cs, ca, ra, ua, cl, body, body
-- length) in the order backends/redis_backend.py decodes it; false (nil) for an absent claim or
-- status, and for the body and its length unless asked for. `body`: true for the body and its
-- length, 'size' for the length only (HSTRLEN: the body is not read), false for neither.
-- Returns whether the job exists.
-- A reserved job (IN_PROGRESS in :rsv) is recorded as every read shows it: PENDING without a
-- claim (S-prefetch).
local PL_RECORD_WIDTH = 12
local function pl_append_record(out, qprefix, prio, id19, body)
  local bkey, mkey, ckey = pl_job_keys(qprefix, prio)
  local s, aa, ar, ca, ra, ua, cl = pl_meta_parse(redis.call('HGET', mkey, id19))
  if not s then return false end
  if s == '1' and redis.call('ZSCORE', pl_rsv_index(qprefix, prio), id19) then
    s, cl = '0', ''
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = prio, id19, s, aa, ar
  out[n + 6] = redis.call('HGET', ckey, id19)
  out[n + 7], out[n + 8], out[n + 9] = ca, ra, ua
  if cl == '' then out[n + 10] = false else out[n + 10] = cl end
  out[n + 11], out[n + 12] = false, false
  if body == 'size' then
    out[n + 12] = redis.call('HSTRLEN', bkey, id19)
  elseif body then
    local value = redis.call('HGET', bkey, id19) or ''
    out[n + 11], out[n + 12] = value, #value
  end
  return true
end

-- How many of the jobs `ids` (in order) fit a reply budget of `max_bytes`, each costing its
-- body's length plus `per_job` (contract.ByteBudget); lengths by HSTRLEN, bodies unread.
local function pl_fitting(bkey, ids, max_bytes, per_job)
  local left = max_bytes
  for i, id19 in ipairs(ids) do
    left = left - redis.call('HSTRLEN', bkey, id19) - per_job
    if left < 0 then return i - 1 end
  end
  return #ids
end

-- The bodies of the leading jobs `ids` that fit a reply budget (as pl_fitting), read in chunks
-- of as many jobs as fit the budget left even at the body cap `body_cap` (one HMGET per chunk,
-- no length read), and, once not one more such job would fit, one HSTRLEN before each HGET.
-- A body over the cap (stored before the cap was lowered) is caught when read: the result
-- never passes the budget.
local function pl_fitting_bodies(bkey, ids, max_bytes, per_job, body_cap)
  local bodies, left, i = {}, max_bytes, 1
  while i <= #ids do
    local k = math.min(math.floor(left / (body_cap + per_job)), PL_CHUNK)
    if k < 1 then
      if redis.call('HSTRLEN', bkey, ids[i]) + per_job > left then return bodies end
      k = 1
    end
    local chunk = redis.call('HMGET', bkey, unpack(ids, i, math.min(i + k - 1, #ids)))
    for j = 1, #chunk do
      local body = chunk[j] or ''
      left = left - #body - per_job
      if left < 0 then return bodies end
      bodies[#bodies + 1] = body
    end
    i = i + #chunk
  end
  return bodies
end

-- Variadic HMGET of `fields` (chunked): values in the same order, false for missing ones.
local function pl_hmget(key, fields)
  local out = {}
  for first = 1, #fields, PL_CHUNK do
    local part = redis.call('HMGET', key,
      unpack(fields, first, math.min(first + PL_CHUNK - 1, #fields)))
    for i = 1, #part do out[#out + 1] = part[i] end
  end
  return out
end

-- Write `values` (a table field -> value) to hash `key` with chunked variadic HSETs; fields in
-- `order` (each once) so the call is deterministic for AOF/replicas.
local function pl_hset_fields(key, order, values)
  local args = {}
  for _, f in ipairs(order) do
    args[#args + 1] = f
    args[#args + 1] = values[f]
  end
  pl_chunked('HSET', key, args)
end

-- Batched index moves: a script that moves many jobs between indexes collects the ZREM/ZADD
-- arguments per index key here and applies them once at the end with variadic calls (one
-- redis.call per index per chunk instead of two to four per job). Only for scripts that never
-- remove a job from and add it to the same index (removals are all applied first).
local function pl_index_moves(qprefix)
  return {qprefix = qprefix, rem = {}, add = {}, order = {rem = {}, add = {}}}
end

local function pl_move_args(moves, kind, key)
  local lists = moves[kind]
  local list = lists[key]
  if not list then
    list = {}
    lists[key] = list
    local order = moves.order[kind]
    order[#order + 1] = key
  end
  return list
end

-- pl_unindex, deferred
local function pl_move_unindex(moves, prio, state, member, id19)
  local ra = pl_move_args(moves, 'rem', pl_ra_index(moves.qprefix, prio, state))
  ra[#ra + 1] = member
  if state ~= '0' then
    local ua = pl_move_args(moves, 'rem', pl_ua_index(moves.qprefix, prio, state))
    ua[#ua + 1] = id19
  end
  if state == '1' then
    local rsv = pl_move_args(moves, 'rem', pl_rsv_index(moves.qprefix, prio))
    rsv[#rsv + 1] = id19
  end
end

-- pl_index, deferred
local function pl_move_index(moves, prio, state, member, id19, ua_score)
  local ra = pl_move_args(moves, 'add', pl_ra_index(moves.qprefix, prio, state))
  ra[#ra + 1] = 0
  ra[#ra + 1] = member
  if state ~= '0' then
    local ua = pl_move_args(moves, 'add', pl_ua_index(moves.qprefix, prio, state))
    ua[#ua + 1] = ua_score
    ua[#ua + 1] = id19
  end
end

-- Apply the collected moves: every removal, then every addition, keys in first-use order.
local function pl_apply_moves(moves)
  for _, key in ipairs(moves.order.rem) do pl_chunked('ZREM', key, moves.rem[key]) end
  for _, key in ipairs(moves.order.add) do pl_chunked('ZADD', key, moves.add[key]) end
end

-- Return reserved jobs (their metas already parsed: s, aa, ar, ca, ra, ua) to PENDING with
-- nothing used: ra1 -> ra0 (same member: run_after unchanged), the reservation removed, meta
-- {s=0, ua unchanged (now if not given), cl=''}. `jobs` is a list of {id19, aa, ar, ca, ra, ua}.
local function pl_return_reserved(qprefix, prio, now_text, jobs)
  if #jobs == 0 then return end
  local moves = pl_index_moves(qprefix)
  local order, metas = {}, {}
  for _, job in ipairs(jobs) do
    local id19, aa, ar, ca, ra, ua = job[1], job[2], job[3], job[4], job[5], job[6]
    local member = pl_member(tonumber(ra), id19)
    pl_move_unindex(moves, prio, '1', member, id19)
    pl_move_index(moves, prio, '0', member, id19, 0)
    order[#order + 1] = id19
    -- updated_at as before the reservation, which reads never showed (S-prefetch)
    metas[id19] = pl_meta('0', aa, ar, ca, ra, ua or now_text, '')
  end
  pl_apply_moves(moves)
  local _, mkey = pl_job_keys(qprefix, prio)
  pl_hset_fields(mkey, order, metas)
end

-- Store new PENDING jobs, read from ARGV at the given base indexes (5 values from each base:
-- priority, run_after ms ('' = now), attempts allowed, custom status (already truncated),
-- body), as enqueue.lua documents. Ids are taken per priority with one INCRBY (the batch is
-- atomic, so they are exactly the ids one INCR per job would give) and the columns and index
-- entries written with chunked variadic calls. Returns the ids (numbers) in `bases` order, or
-- nil and an error reply (before writing anything) when an id would pass 2^53.
local function pl_store_jobs(qprefix, now, bases)
  local per_prio = {}
  for _, base in ipairs(bases) do
    local prio = ARGV[base]
    per_prio[prio] = (per_prio[prio] or 0) + 1
  end
  local next_id = {}
  for prio, count in pairs(per_prio) do
    local cur = tonumber(redis.call('GET', pl_prio_prefix(qprefix, prio) .. ':seq') or '0')
    if cur + count > PL_MAX_ID then
      return nil, redis.error_reply('PLIDRANGE local ids of priority ' .. prio .. ' exhausted')
    end
    next_id[prio] = cur + 1
  end
  for prio, count in pairs(per_prio) do
    redis.call('INCRBY', pl_prio_prefix(qprefix, prio) .. ':seq', count)
  end
  local ids = {}
  local now_text = pl_int(now)
  local moves = pl_index_moves(qprefix)
  local columns = {}  -- prio -> {order = {id19...}, b = {}, m = {}, c_order = {}, c = {}}
  for _, base in ipairs(bases) do
    local prio = ARGV[base]
    local ra = now
    if ARGV[base + 1] ~= '' then ra = pl_clamp_ra(tonumber(ARGV[base + 1])) end
    local id = next_id[prio]
    next_id[prio] = id + 1
    local id19 = string.format('%019d', id)
    local col = columns[prio]
    if not col then
      col = {order = {}, b = {}, m = {}, c_order = {}, c = {}}
      columns[prio] = col
    end
    col.order[#col.order + 1] = id19
    col.b[id19] = ARGV[base + 4]
    col.m[id19] = pl_meta('0', ARGV[base + 2], ARGV[base + 2], now_text, pl_int(ra), now_text, '')
    if ARGV[base + 3] ~= '' then
      col.c_order[#col.c_order + 1] = id19
      col.c[id19] = ARGV[base + 3]
    end
    pl_move_index(moves, prio, '0', pl_member(ra, id19), id19, now)
    ids[#ids + 1] = id
  end
  for prio, col in pairs(columns) do
    local bkey, mkey, ckey = pl_job_keys(qprefix, prio)
    pl_hset_fields(bkey, col.order, col.b)
    pl_hset_fields(mkey, col.order, col.m)
    pl_hset_fields(ckey, col.c_order, col.c)
  end
  pl_apply_moves(moves)
  return ids
end

-- Jobs present in every state of the priorities 1..top (ZCARD of each ra<state> index).
local function pl_present(qprefix, top)
  local states = {0, 0, 0, 0}
  for prio = 1, top do
    for state = 0, 3 do
      states[state + 1] = states[state + 1] +
        redis.call('ZCARD', pl_ra_index(qprefix, prio, tostring(state)))
    end
  end
  return states
end

-- A queue without a ledger hash is one created by a version without the ledger (createQueue
-- makes the hash): its books open with the jobs present as enqueued (ledger.lua reports
-- the same until then). Write scripts call this first, before changing any job, so it costs
-- one EXISTS once the hash exists. (Over maxmemory a delete-only script on such a queue is
-- refused until any other write opened its books.)
local function pl_open_books(registry, queue, qprefix)
  local key = qprefix .. ':ledger'
  if redis.call('EXISTS', key) == 1 then return end
  local states = pl_present(qprefix, tonumber(redis.call('HGET', registry, queue) or '0'))
  redis.call('HSET', key, 'enqueued', states[1] + states[2] + states[3] + states[4])
end

-- Add `n` to the queue's ledger counter `counter` (pinlater/storage/ledger.py) in the script
-- that made the change, after its other writes (a delete-only script's first write then is a
-- delete, which runs over maxmemory); nothing when n is 0. The ledger is the HASH
-- <qprefix>:ledger, counter -> count, removed with the queue.
local function pl_book(qprefix, counter, n)
  if n > 0 then redis.call('HINCRBY', qprefix .. ':ledger', counter, n) end
end
