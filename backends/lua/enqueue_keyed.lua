#!lua
-- enqueue_keyed: store a batch of new jobs as PENDING, atomically, where a job may carry a
-- unique key: a job whose key is held stores nothing and reports the holder.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] queue name
-- ARGV[2] queue key prefix pl:<shard>:q:<queue>
-- ARGV[3] clock offset ms
-- ARGV[4] unique window ms
-- ARGV[5] number of jobs n, then 6 values per job from ARGV[6]: the 5 of enqueue.lua
--         (priority, run_after ms or '', attempts allowed, custom status, body), then the
--         unique key ('' = none; validated printable ASCII)
-- Reads and writes :uk (HASH key -> 'prio|id|expires_at') and :ux (ZSET key by expires_at):
-- a key is held while its record's expires_at > now; a job whose key is not held is stored
-- (pl_store_jobs) and its key recorded with expires_at = now + window, replacing an expired
-- record. A key repeated in the batch: its first job decides, later ones report that job.
-- Ledger (:ledger): 'enqueued' += jobs stored, 'deduplicated' += jobs not stored.
-- Returns 3 values per job in order: priority, local id (decimal strings), '1' if stored
-- else '0' (then priority and id are the holder's).
local registry, queue, qprefix = KEYS[1], ARGV[1], ARGV[2]
if not pl_queue_exists(registry, queue) then return pl_no_queue() end
pl_open_books(registry, queue, qprefix)
local now = pl_now(ARGV[3])
local expires = now + tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local ukey, xkey = qprefix .. ':uk', qprefix .. ':ux'

local first = {}     -- key -> position (1-based) of its first job in the batch
local holder = {}    -- position -> {prio, id} of the job holding its key (not stored)
local bases = {}     -- ARGV bases of the jobs to store, and their positions
local stored_at = {}
for i = 1, n do
  local base = 6 + (i - 1) * 6
  local key = ARGV[base + 5]
  if key ~= '' and first[key] then
    holder[i] = first[key]  -- a position: resolved once the first job is settled
  else
    local record = false
    if key ~= '' then
      first[key] = i
      record = redis.call('HGET', ukey, key)
    end
    local prio, id, until_ms
    if record then prio, id, until_ms = string.match(record, '^(%d+)|(%d+)|(%-?%d+)$') end
    if until_ms and tonumber(until_ms) > now then
      holder[i] = {prio, id}
    else
      bases[#bases + 1] = base
      stored_at[#stored_at + 1] = i
    end
  end
end

local ids, err = pl_store_jobs(qprefix, now, bases)
if not ids then return err end
local result = {}  -- position -> {prio, id, stored}
local records, expiries = {}, {}
for k, i in ipairs(stored_at) do
  local base = bases[k]
  local id = pl_int(ids[k])
  result[i] = {ARGV[base], id, '1'}
  local key = ARGV[base + 5]
  if key ~= '' then
    records[#records + 1] = key
    records[#records + 1] = ARGV[base] .. '|' .. id .. '|' .. pl_int(expires)
    expiries[#expiries + 1] = expires
    expiries[#expiries + 1] = key
  end
end
pl_chunked('HSET', ukey, records)
pl_chunked('ZADD', xkey, expiries)
pl_book(qprefix, 'enqueued', #ids)
pl_book(qprefix, 'deduplicated', n - #ids)

local out = {}
for i = 1, n do
  local r = result[i]
  if not r then
    local h = holder[i]
    if type(h) == 'number' then
      local settled = result[h] or holder[h]
      r = {settled[1], settled[2], '0'}
    else
      r = {h[1], h[2], '0'}
    end
  end
  out[#out + 1] = r[1]
  out[#out + 1] = r[2]
  out[#out + 1] = r[3]
end
return out
