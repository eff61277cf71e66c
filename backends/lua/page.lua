#!lua flags=no-writes
-- page: one page of a state's run_after index of one priority, after a cursor, optionally
-- limited to run_after > now (future) or <= now (due). Read-only: runs under OOM.
-- Serves scan (descending), dry-run dequeue and body-filtered count/delete (ascending).
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] priority
-- ARGV[5] state '0'..'3'
-- ARGV[6] 'desc' or 'asc'
-- ARGV[7] cursor member '<ra16>:<id19>' to continue strictly after ('' = from the start)
-- ARGV[8] time filter: 'future' (run_after > now), 'due' (<= now) or 'all'
-- ARGV[9] page size (>= 1)
-- ARGV[10] '1' to include bodies
-- ARGV[11] reply budget in bytes ('' or absent = none): records stop before the first job whose
--          body does not fit (body lengths plus ARGV[12] bytes each, as pl_fitting); the count
--          and cursor still describe the members read
-- ARGV[13] '1': the jobs as reads show them (scan, count, delete): a reserved job (in :rsv) is
--          PENDING, not IN_PROGRESS (S-prefetch); else (a dry-run dequeue) as stored
-- Reads ra<state> with ZRANGEBYLEX/ZREVRANGEBYLEX and the job hashes. Returns the number of
-- index members read, the last one ('' if none; the next page's cursor), then 12 values per
-- job (pl_append_record).
local registry, queue, qprefix, prio, state = KEYS[1], ARGV[1], ARGV[2], ARGV[4], ARGV[5]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local count = tonumber(ARGV[9])
if count < 1 then return {0, ''} end
local desc, cursor, filter = ARGV[6] == 'desc', ARGV[7], ARGV[8]
-- Bounds are kept as the text after '(' (exclusive); nil means open ('-' / '+').
local low, high
if filter ~= 'all' then
  local split = pl_ra_text(pl_now(ARGV[3])) .. ';'   -- between '<now>:<id>' and '<now+1>:'
  if filter == 'future' then low = split else high = split end
end
if cursor ~= '' then
  if desc then
    if not high or cursor < high then high = cursor end
  else
    if not low or cursor > low then low = cursor end
  end
end
local key = pl_ra_index(qprefix, prio, state)
local min = low and ('(' .. low) or '-'
local max = high and ('(' .. high) or '+'
local function read(n)
  if desc then return redis.call('ZREVRANGEBYLEX', key, max, min, 'LIMIT', 0, n) end
  return redis.call('ZRANGEBYLEX', key, min, max, 'LIMIT', 0, n)
end
local members
local shown = ARGV[13] == '1'
local rsv = pl_rsv_index(qprefix, prio)
if shown and state == '1' then
  -- reserved jobs read as PENDING: skipped here (at most ZCARD of them among the members)
  members = {}
  for _, member in ipairs(read(count + redis.call('ZCARD', rsv))) do
    if #members == count then break end
    if not redis.call('ZSCORE', rsv, pl_member_id(member)) then members[#members + 1] = member end
  end
elseif shown and state == '0' then
  -- and merged into PENDING's page, in its order and window (few: a broker's buffer)
  members = read(count)
  local _, mkey = pl_job_keys(qprefix, prio)
  for _, id19 in ipairs(redis.call('ZRANGE', rsv, 0, -1)) do
    local s, _, _, _, ra = pl_meta_parse(redis.call('HGET', mkey, id19))
    local member = s == '1' and pl_member(tonumber(ra), id19)
    if member and (not low or member > low) and (not high or member < high) then
      members[#members + 1] = member
    end
  end
  if desc then table.sort(members, function(a, b) return a > b end) else table.sort(members) end
  while #members > count do table.remove(members) end
else
  members = read(count)
end
local out = {#members, members[#members] or ''}
local with_body = ARGV[10] == '1'
local ids = {}
for i, member in ipairs(members) do ids[i] = pl_member_id(member) end
local fitting = #ids
if (ARGV[11] or '') ~= '' then
  fitting = pl_fitting(pl_job_keys(qprefix, prio), ids, tonumber(ARGV[11]), tonumber(ARGV[12]))
end
for i = 1, fitting do
  pl_append_record(out, qprefix, prio, ids[i], with_body)
end
return out
