#!lua flags=no-writes
-- lookup: records of the given jobs (missing ones omitted). Read-only: runs under OOM.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] '1' to include bodies
-- ARGV[4] number of jobs n, then priority, id19 per job from ARGV[5]
-- Reads hashes pl:..:p<prio>:j:<id19>. Returns 11 values per found job (see _lib.lua
-- pl_append_record).
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local with_body = ARGV[3] == '1'
local out = {}
for i = 0, tonumber(ARGV[4]) - 1 do
  pl_append_record(out, qprefix, ARGV[5 + i * 2], ARGV[6 + i * 2], with_body)
end
return out
