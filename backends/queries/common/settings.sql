-- The runtime queue settings document (pinlater/ops/runtime_settings.py): one row, id 1, in
-- {table} on the first shard of the map, with a version that every write increments. Columns:
--   id (always 1), version (0 = nothing stored yet), document (JSON bytes, opaque here).

-- name: settings_read
-- The version, and the document only when the version differs from :known (an idle poll reads
-- one small integer).
SELECT version, CASE WHEN version <> :known THEN document END FROM {table} WHERE id = 1

-- name: settings_update
-- Compare-and-set: store the new document only if the version is still :expected.
UPDATE {table} SET version = version + 1, document = :document
WHERE id = 1 AND version = :expected
