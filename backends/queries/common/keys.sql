-- Unique-key records shared by SQLite and MySQL (backends/sql_base.py, `enqueue_keyed`).
-- {table} = one queue's key table, columns: ukey (the key, compared byte-wise), priority and
-- local_id of the job that holds it (local_id NULL only inside the enqueue transaction that
-- claims the key, before its job is inserted), created_at and expires_at (epoch ms).

-- name: key_holders
-- The records of the given keys ({ids} binds the keys, padded with '', which no key is).
SELECT ukey, priority, local_id FROM {table} WHERE ukey IN ({ids})

-- name: key_stats
-- One key table as one row of `Shard.queue_stats` (joined like table_stats): the earliest
-- expires_at of its records (NULL when none; the expiry index makes it a seek).
SELECT {part} AS part, MIN(expires_at) AS first_expiry FROM {table}
