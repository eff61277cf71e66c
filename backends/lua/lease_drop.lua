#!lua
-- lease_drop: give up a lease held by the owner, expired or not (semantics.md S-leases).
-- KEYS[1] registry HASH pl:<shard>:queues (unused; every script names it)
-- ARGV[1] leases HASH pl:<shard>:leases (see lease_take.lua), ARGV[2] name, ARGV[3] owner
-- Returns 1 when it removed the owner's lease, else 0.
local held = redis.call('HGET', ARGV[1], ARGV[2])
if not held then return 0 end
local _, who = string.match(held, '^(%-?%d+)|(.*)$')
if who ~= ARGV[3] then return 0 end
redis.call('HDEL', ARGV[1], ARGV[2])
return 1
