#!lua flags=no-writes
-- count: jobs in a state over several priorities, run_after > now (future) or <= now,
-- capped. Read-only: runs under OOM. (Body-filtered counts page with page.lua instead.)
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] state '0'..'3'
-- ARGV[5] '1' future, '0' due
-- ARGV[6] cap
-- ARGV[7] number of priorities n, then the priorities from ARGV[8]
-- ZLEXCOUNT on ra<state> (O(log n) per priority); reserved jobs (all due) count as PENDING,
-- not IN_PROGRESS, as every read shows them (S-prefetch). Returns min(total, cap).
local registry, queue, qprefix, state = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local split = '(' .. pl_ra_text(pl_now(ARGV[3])) .. ';'
local min, max = '-', split
if ARGV[5] == '1' then min, max = split, '+' end
local total = 0
for i = 0, tonumber(ARGV[7]) - 1 do
  local prio = ARGV[8 + i]
  local found = redis.call('ZLEXCOUNT', pl_ra_index(qprefix, prio, state), min, max)
  if ARGV[5] == '0' then found = found + pl_reserved_shift(qprefix, prio, state) end
  total = total + found
end
return math.min(total, tonumber(ARGV[6]))
