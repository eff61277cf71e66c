#!lua
-- settings_write: compare-and-set of the runtime queue settings document.
-- KEYS[1] registry HASH pl:<shard>:queues (unused; every script names it)
-- ARGV[1] settings HASH pl:<shard>:settings {version, doc}
-- ARGV[2] the version the caller read (0: nothing stored yet)
-- ARGV[3] the new document
-- Returns the new version, or nil (nothing written) when another writer changed it first.
local version = tonumber(redis.call('HGET', ARGV[1], 'version') or '0')
if version ~= tonumber(ARGV[2]) then return false end
redis.call('HSET', ARGV[1], 'version', version + 1, 'doc', ARGV[3])
return version + 1
