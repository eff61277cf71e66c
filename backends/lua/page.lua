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
local members
if desc then
  members = redis.call('ZREVRANGEBYLEX', key, max, min, 'LIMIT', 0, count)
else
  members = redis.call('ZRANGEBYLEX', key, min, max, 'LIMIT', 0, count)
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
