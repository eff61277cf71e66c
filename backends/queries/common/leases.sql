-- Leases of the prefetching broker (pinlater/storage/leases.py), shared by SQLite and MySQL:
-- {table} is the shard's lease table, columns name (primary key), owner, expires_at (epoch ms,
-- shard clock). `acquire_lease` runs the dialect's lease_take, then lease_owner in the same
-- transaction: the lease is the caller's exactly when lease_owner answers the caller.

-- name: lease_owner
-- The owner of one lease (after lease_take: the caller if it got or kept it).
SELECT owner FROM {table} WHERE name = :name

-- name: lease_drop
-- Give up a lease held by :owner (expired or not).
DELETE FROM {table} WHERE name = :name AND owner = :owner

-- name: lease_list
-- Unexpired leases whose name starts with :prefix (compared as a prefix, never a pattern).
SELECT name, owner FROM {table}
WHERE expires_at > :now AND SUBSTR(name, 1, :prefix_length) = :prefix
ORDER BY name
LIMIT :limit
