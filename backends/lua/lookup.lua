#!lua flags=no-writes
-- lookup: records of the given jobs (missing ones omitted). Read-only: runs under OOM.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] '1' to include bodies (and their lengths)
-- ARGV[4] most body bytes to return ('' = no bound): when the found bodies add up to more,
--         none is read (HSTRLEN gives their lengths)
-- ARGV[5] number of jobs n, then priority, id19 per job from ARGV[6]
-- Reads the column hashes of each job. Returns 12 values per found job (see _lib.lua
-- pl_append_record).
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
local with_body = ARGV[3] == '1'
local max_bytes = tonumber(ARGV[4])
local body = with_body and (max_bytes and 'size' or true)
local out = {}
for i = 0, tonumber(ARGV[5]) - 1 do
  pl_append_record(out, qprefix, ARGV[6 + i * 2], ARGV[7 + i * 2], body)
end
if body == 'size' then
  local total = 0
  for j = PL_RECORD_WIDTH, #out, PL_RECORD_WIDTH do total = total + out[j] end
  if total <= max_bytes then
    for j = 1, #out, PL_RECORD_WIDTH do
      local bkey = pl_job_keys(qprefix, out[j])
      out[j + 10] = redis.call('HGET', bkey, out[j + 1]) or ''
    end
  end
end
return out
