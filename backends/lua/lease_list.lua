#!lua flags=no-writes
-- lease_list: the unexpired leases whose name starts with a prefix (semantics.md F-leases).
-- KEYS[1] registry HASH pl:<shard>:queues (unused; every script names it)
-- ARGV[1] leases HASH pl:<shard>:leases (see lease_take.lua), ARGV[2] name prefix ('' all)
-- ARGV[3] clock offset ms, ARGV[4] the most leases to return
-- The hash holds one field per lease name ever taken and not released (partitions and
-- servers: few). Returns name, owner, name, owner ...
local prefix, cap = ARGV[2], tonumber(ARGV[4])
local now = pl_now(ARGV[3])
local all = redis.call('HGETALL', ARGV[1])
local out = {}
for i = 1, #all, 2 do
  local name = all[i]
  if #out < 2 * cap and string.sub(name, 1, #prefix) == prefix then
    local expires, who = string.match(all[i + 1], '^(%-?%d+)|(.*)$')
    if tonumber(expires) > now then
      out[#out + 1] = name
      out[#out + 1] = who
    end
  end
end
return out
