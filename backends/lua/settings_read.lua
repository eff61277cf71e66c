#!lua flags=no-writes
-- settings_read: the runtime queue settings document and its version (pinlater/ops/
-- runtime_settings.py), the document only when the version differs from the caller's.
-- Read-only: runs under OOM.
-- KEYS[1] registry HASH pl:<shard>:queues (unused; every script names it)
-- ARGV[1] settings HASH pl:<shard>:settings {version, doc}
-- ARGV[2] the version the caller has
-- Returns {version} when unchanged, else {version, doc} (version 0, '' when nothing stored).
local version = tonumber(redis.call('HGET', ARGV[1], 'version') or '0')
if version == tonumber(ARGV[2]) then return {version} end
return {version, redis.call('HGET', ARGV[1], 'doc') or ''}
