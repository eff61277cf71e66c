#!lua
-- lease_list: the unexpired leases whose name starts with a prefix (semantics.md S-leases),
-- forgetting up to ARGV[6] leases that expired before now - ARGV[5] (per-process heartbeats
-- would otherwise pile up, one per restart).
-- KEYS[1] registry HASH pl:<shard>:queues (unused; every script names it)
-- ARGV[1] leases HASH pl:<shard>:leases (see lease_take.lua), ARGV[2] name prefix ('' all)
-- ARGV[3] clock offset ms, ARGV[4] the most leases to return
-- ARGV[5] ms after its expiry that a lease is forgotten, ARGV[6] the most forgotten per call
-- Returns name, owner, name, owner ...
local prefix, cap = ARGV[2], tonumber(ARGV[4])
local now = pl_now(ARGV[3])
local stale, forget = now - tonumber(ARGV[5]), tonumber(ARGV[6])
local all = redis.call('HGETALL', ARGV[1])
local out, forgotten = {}, {}
for i = 1, #all, 2 do
  local name = all[i]
  local expires, who = string.match(all[i + 1], '^(%-?%d+)|(.*)$')
  expires = tonumber(expires)
  if expires < stale and #forgotten < forget then
    forgotten[#forgotten + 1] = name
  elseif #out < 2 * cap and expires > now and string.sub(name, 1, #prefix) == prefix then
    out[#out + 1] = name
    out[#out + 1] = who
  end
end
pl_chunked('HDEL', ARGV[1], forgotten)
return out
