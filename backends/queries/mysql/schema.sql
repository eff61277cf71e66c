-- MySQL/MariaDB layout (backends/mysql.py): one database per (instance, db index, queue), named
-- <prefix>_<shard>_<queue> (e.g. plq_1d2_emails, as the original), holding one job table per
-- priority, jobs_p<priority>. Dropping a queue is one DROP DATABASE; a queue's tables are
-- addressed fully qualified, so no connection ever needs `USE`. Database names are
-- case-sensitive on Linux (lower_case_table_names=0), so "Foo" and "foo" are two queues there;
-- a server with lower_case_table_names=1/2 would fold them into one (do not run shards so).
-- Times are BIGINT epoch ms from the server clock (no TIMESTAMP: 2038 and second precision);
-- LONGBLOB holds any configurable body cap (limits go up to 64 MiB), MEDIUMTEXT any status cap.
-- AUTO_INCREMENT is persistent across restarts on MariaDB >= 10.2.4 and MySQL >= 8.0, so a
-- local id is never handed out twice while the queue exists.
-- A queue exists while its database holds jobs_p1 (a database without it is one whose
-- deleteQueue moved the tables away, or whose createQueue has not made them yet). deleteQueue
-- first moves every job table into the shard's trash database <prefix>__deleted_<shard> (a
-- name no queue database can have: shard names hold no underscore) with one atomic RENAME, so
-- the queue is gone at once and a createQueue of the same name gets fresh tables; then it drops
-- the empty queue database and, last, the moved tables. Whatever a crash leaves in the trash is
-- dropped by the janitor (Shard.finish_deletes).

-- name: create_database
-- A queue's database on this shard; binary collation keeps claims and statuses byte-exact.
CREATE DATABASE IF NOT EXISTS {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin

-- name: create_job_table
-- One job table. `ready` serves dequeue, retry, counts and scans in (state, run_after, local_id)
-- order; `updated` serves claim expiry and purge by (state, updated_at).
CREATE TABLE IF NOT EXISTS {table} (
    local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    state TINYINT NOT NULL,
    claim VARCHAR(255) NULL,
    attempts_allowed INT NOT NULL,
    attempts_remaining INT NOT NULL,
    custom_status MEDIUMTEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    run_after BIGINT NOT NULL,
    body LONGBLOB NOT NULL,
    reserved_until BIGINT NULL,
    PRIMARY KEY (local_id),
    KEY ready (state, run_after, local_id),
    KEY updated (state, updated_at),
    KEY reserved (reserved_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin ROW_FORMAT=DYNAMIC

-- name: reserved_tables
-- (database, table) of this shard's tables that have reserved_until: job tables that lack it
-- (made before the prefetching broker; `stats_tables` lists them all) get it, and its index,
-- from a shard handle before its first call.
SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA LIKE :pattern AND COLUMN_NAME = 'reserved_until'

-- name: add_reserve_column
-- The reservation deadline (common/jobs.sql) and its index on a job table made before it:
-- NULL in every row (no job is reserved); an online change (no table lock).
ALTER TABLE {table} ADD COLUMN reserved_until BIGINT NULL, ADD KEY reserved (reserved_until),
    ALGORITHM=INPLACE, LOCK=NONE

-- name: create_ledger_table
-- One queue's ledger (queries/common/ledger.sql), in the queue's database, so it leaves with
-- the queue's tables. A journal: every write transaction inserts one row of its counts
-- (ledger_add), so no two transactions ever wait for the same ledger row, and a transaction
-- its client abandoned (a server killed mid-call, whose session MySQL keeps until it notices)
-- locks only its own row; the janitor folds the rows (ledger_fold_*). Row 1 is reserved for
-- the opening balance of a queue created before the ledger (ids start at 2).
CREATE TABLE IF NOT EXISTS {table} (
    slot BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    enqueued BIGINT NOT NULL DEFAULT 0,
    deduplicated BIGINT NOT NULL DEFAULT 0,
    dequeued BIGINT NOT NULL DEFAULT 0,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    retried BIGINT NOT NULL DEFAULT 0,
    reclaimed BIGINT NOT NULL DEFAULT 0,
    deleted BIGINT NOT NULL DEFAULT 0,
    purged BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (slot)
) ENGINE=InnoDB AUTO_INCREMENT=2

-- name: ledger_seed
-- The opening balance of a queue that held jobs before it had a ledger (the jobs present
-- then), in the reserved row 1 unless it is there.
INSERT IGNORE INTO {table} (slot, enqueued) VALUES (1, :enqueued)

-- name: ledger_add
-- overrides: a journal row per transaction (see create_ledger_table), not an UPDATE of a row
-- that concurrent (or abandoned) transactions would lock
INSERT INTO {table}
    (enqueued, deduplicated, dequeued, succeeded, failed, retried, reclaimed, deleted, purged)
VALUES (:enqueued, :deduplicated, :dequeued, :succeeded, :failed, :retried, :reclaimed,
        :deleted, :purged)

-- name: ledger_fold_last
-- The last of the first :limit journal rows, and how many rows that is (what one fold takes).
SELECT MAX(slot), COUNT(*) FROM (SELECT slot FROM {table} ORDER BY slot LIMIT :limit) AS first

-- name: ledger_fold_sum
-- The sums of the journal rows up to :last, read with their locks (a row of a transaction not
-- yet committed is waited for, never left out).
SELECT COALESCE(SUM(enqueued), 0), COALESCE(SUM(deduplicated), 0), COALESCE(SUM(dequeued), 0),
       COALESCE(SUM(succeeded), 0), COALESCE(SUM(failed), 0), COALESCE(SUM(retried), 0),
       COALESCE(SUM(reclaimed), 0), COALESCE(SUM(deleted), 0), COALESCE(SUM(purged), 0)
FROM {table} WHERE slot <= :last FOR UPDATE

-- name: ledger_fold_set
-- Row :last becomes the sums of every row up to it.
UPDATE {table}
SET enqueued = :enqueued, deduplicated = :deduplicated, dequeued = :dequeued,
    succeeded = :succeeded, failed = :failed, retried = :retried, reclaimed = :reclaimed,
    deleted = :deleted, purged = :purged
WHERE slot = :last

-- name: ledger_fold_delete
-- The rows folded into row :last.
DELETE FROM {table} WHERE slot < :last

-- name: create_settings_database
-- The shard's own database, <prefix>_<shard>, for the runtime queue settings: queue databases
-- are <prefix>_<shard>_<queue>, so this name is never taken for a queue (nor listed as one).
CREATE DATABASE IF NOT EXISTS {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin

-- name: create_settings
-- The runtime queue settings (queries/common/settings.sql): one row, id 1.
CREATE TABLE IF NOT EXISTS {table} (
    id TINYINT NOT NULL,
    version BIGINT NOT NULL,
    document LONGBLOB NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin

-- name: seed_settings
-- Its one row: version 0, nothing stored.
INSERT IGNORE INTO {table} (id, version, document) VALUES (1, 0, '')

-- name: create_leases
-- The broker's leases (common/leases.sql), in the shard's own database beside the settings.
CREATE TABLE IF NOT EXISTS {table} (
    name VARCHAR(200) NOT NULL,
    owner VARCHAR(200) NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin

-- name: lease_prune
-- Forget up to :limit leases that expired before :stale (live_leases runs it: a server's
-- heartbeat is a lease per process, so without it the table grew by a row per restart).
DELETE FROM {table} WHERE expires_at < :stale LIMIT :limit

-- name: lease_take
-- Take the lease, or renew it: only when it is free, expired or already :owner's. SET runs
-- left to right: after the owner assignment, owner = :owner exactly when the lease is ours.
INSERT INTO {table} (name, owner, expires_at) VALUES (:name, :owner, :expires)
ON DUPLICATE KEY UPDATE
    owner = IF(owner = :owner OR expires_at <= :now, :owner, owner),
    expires_at = IF(owner = :owner, :expires, expires_at)

-- name: drop_database
-- Remove a queue's database with every job of every priority.
DROP DATABASE IF EXISTS {db}

-- name: list_databases
-- Databases whose name matches a LIKE pattern and that hold a queue's first job table (the
-- caller re-checks each name exactly).
SELECT TABLE_SCHEMA FROM information_schema.TABLES
WHERE TABLE_SCHEMA LIKE :pattern AND TABLE_NAME = 'jobs_p1'

-- name: stats_tables
-- (database, table) of every table in the databases whose name matches a LIKE pattern: the
-- queues of this shard and their tables, for `queue_stats` (one catalogue read).
SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA LIKE :pattern

-- name: database_tables
-- The tables of one database, by its exact name.
SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = :db

-- name: move_tables
-- The head of one atomic RENAME of several tables; each `table_move` follows, comma-separated.
RENAME TABLE

-- name: table_move
-- One pair of a `move_tables` statement.
{source} TO {target}

-- name: drop_table
-- Remove one (moved) job table with every job in it.
DROP TABLE IF EXISTS {table}

-- name: ddl_lock_wait
-- How long this session's DDL waits for the metadata locks of the tables it changes (seconds;
-- a lower server setting is kept): calls on the queue queue up behind a waiting DDL.
SET SESSION lock_wait_timeout = LEAST(@@GLOBAL.lock_wait_timeout, :seconds)

-- name: server_now
-- The server clock in epoch ms (the session time zone is pinned to +00:00).
SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)

-- name: statement_clock
-- The shard clock as an expression that replaces :now inside one statement (the QueryBook's
-- "clocked" queries, sql_base.py): NOW(3) is fixed for the whole statement, so every row it
-- touches gets the same time, and the statement needs no separate clock read first.
(CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + :clock_offset)

-- name: queue_probe
-- Fails with "unknown table" (-> QueueNotFound) unless the queue's first job table exists.
SELECT 1 FROM {table} LIMIT 0

-- name: fifo_index_exists
-- Whether a job table has the `fifo` index (MySQL has no ADD INDEX IF NOT EXISTS).
SELECT COUNT(*) FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = :db AND TABLE_NAME = :table_name AND INDEX_NAME = 'fifo'

-- name: create_fifo_index
-- Serves a FIFO queue's heads (fifo_heads: PENDING jobs in local_id order, no filesort): made
-- by the queue's first FIFO dequeue (backends/sql_fifo.py), so other queues never maintain it.
ALTER TABLE {table} ADD INDEX fifo (state, local_id)
