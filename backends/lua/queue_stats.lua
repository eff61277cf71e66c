#!lua flags=no-writes
-- queue_stats: depth and ages of many queues in one call (Shard.queue_stats). Read-only: runs
-- under OOM.
-- KEYS[1] registry HASH pl:<shard>:queues
-- ARGV[1] clock offset ms
-- ARGV[2] cap (0: ages only, every count 0)
-- ARGV[3] number of priorities n
-- ARGV[4..] pairs: queue name, queue key prefix pl:<shard>:q:<queue>
-- Per queue and priority: ZLEXCOUNT of ra<state> below and above now (as count.lua: reserved
-- jobs count as PENDING, S-prefetch), the lowest
-- score of ua<state> for states 1-3 and of :rsv (the first reservation deadline); per queue
-- the lowest score of :ux (keys' expiry).
-- Returns {now, then per queue 0 (missing) or 1 followed by n x (8 counts: due and future of
-- states 0-3, then 3 oldest updated_at and the first reservation deadline, -1 for none), then
-- the first key expiry (-1 none)}.
local registry = KEYS[1]
local now = pl_now(ARGV[1])
local cap = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local split = '(' .. pl_ra_text(now) .. ';'
local out = {now}
local function put(value)
  out[#out + 1] = value
end
local function lowest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end
for i = 4, #ARGV, 2 do
  local queue, qprefix = ARGV[i], ARGV[i + 1]
  if pl_queue_exists(registry, queue) then
    put(1)
    for prio = 1, n do
      for state = 0, 3 do
        if cap > 0 then
          local ra = pl_ra_index(qprefix, prio, tostring(state))
          local shift = pl_reserved_shift(qprefix, prio, tostring(state))
          put(math.min(redis.call('ZLEXCOUNT', ra, '-', split) + shift, cap))
          put(math.min(redis.call('ZLEXCOUNT', ra, split, '+'), cap))
        else
          put(0)
          put(0)
        end
      end
      for state = 1, 3 do
        put(lowest(pl_ua_index(qprefix, prio, tostring(state))))
      end
      put(lowest(pl_rsv_index(qprefix, prio)))
    end
    put(lowest(qprefix .. ':ux'))
  else
    put(0)
  end
end
return out
