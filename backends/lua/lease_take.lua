#!lua
-- lease_take: take or renew a lease of the prefetching broker (semantics.md S-leases).
-- KEYS[1] registry HASH pl:<shard>:queues (unused; every script names it)
-- ARGV[1] leases HASH pl:<shard>:leases, name -> '<expires_at ms>|<owner>'
-- ARGV[2] lease name, ARGV[3] owner (validated printable ASCII, pinlater/storage/leases.py)
-- ARGV[4] clock offset ms, ARGV[5] ttl ms
-- Takes the lease until now + ttl when it is free, expired (expires_at <= now) or already the
-- owner's; otherwise changes nothing. Returns 1 when the lease is the owner's, else 0.
local key, name, owner = ARGV[1], ARGV[2], ARGV[3]
local now = pl_now(ARGV[4])
local held = redis.call('HGET', key, name)
if held then
  local expires, who = string.match(held, '^(%-?%d+)|(.*)$')
  if who ~= owner and tonumber(expires) > now then return 0 end
end
redis.call('HSET', key, name, pl_int(now + tonumber(ARGV[5])) .. '|' .. owner)
return 1
