#!lua
-- enqueue: store a batch of new jobs as PENDING, atomically; return their local ids.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] number of jobs n, then 5 values per job from ARGV[5]:
--         priority, run_after ms ('' = now), attempts allowed, custom status (already
--         truncated by the caller), body (bytes)
-- Writes (_lib.lua pl_store_jobs): seq INCRBY per priority (pl:..:p<prio>:seq); per job the
--   fields id19 of the column hashes :b (body), :m (meta '0|aa|aa|now|ra|now|') and :c (status,
--   when non-empty), and the member '<ra16>:<id19>' of ra0; one variadic HSET per hash and
--   priority; the ledger's 'enqueued' (:ledger HINCRBY).
-- Returns the ids as decimal strings. Errors (before writing anything) if the queue is not
-- registered or an id would pass 2^53.
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local now = pl_now(ARGV[3])
local bases = {}
for i = 0, tonumber(ARGV[4]) - 1 do bases[i + 1] = 5 + i * 5 end
local ids, err = pl_store_jobs(qprefix, now, bases)
if not ids then return err end
pl_book(qprefix, 'enqueued', #ids)
for i, id in ipairs(ids) do ids[i] = pl_int(id) end
return ids
