-- The per-queue ledger shared by SQLite and MySQL (backends/sql_base.py; the counters are
-- listed in pinlater/storage/ledger.py). {table} = one queue's ledger table on the shard: a
-- write adds its counts as the last statement of its transaction, to the one row (SQLite,
-- whose one writer holds the database anyway) or as a journal row of its own (MySQL overrides
-- ledger_add: no writer ever waits for a ledger row); a read sums the rows.
-- {table} for state_counts is one job table.

-- name: ledger_add
-- Add one transaction's counts to one slot's row (0 rows matched: the slot has no row yet).
UPDATE {table}
SET enqueued = enqueued + :enqueued,
    deduplicated = deduplicated + :deduplicated,
    dequeued = dequeued + :dequeued,
    succeeded = succeeded + :succeeded,
    failed = failed + :failed,
    retried = retried + :retried,
    reclaimed = reclaimed + :reclaimed,
    deleted = deleted + :deleted,
    purged = purged + :purged
WHERE slot = :slot

-- name: ledger_read
-- The queue's counters: the sum of every slot.
SELECT COALESCE(SUM(enqueued), 0), COALESCE(SUM(deduplicated), 0), COALESCE(SUM(dequeued), 0),
       COALESCE(SUM(succeeded), 0), COALESCE(SUM(failed), 0), COALESCE(SUM(retried), 0),
       COALESCE(SUM(reclaimed), 0), COALESCE(SUM(deleted), 0), COALESCE(SUM(purged), 0)
FROM {table}

-- name: count_all
-- Every job of one job table (a ledger's opening balance).
SELECT COUNT(*) FROM {table}

-- name: state_counts
-- Jobs per state in one job table (read in the same snapshot as ledger_read); a reserved
-- job counts as PENDING, as every read shows it (S-prefetch).
SELECT CASE WHEN reserved_until IS NULL THEN state ELSE 0 END AS shown, COUNT(*)
FROM {table} GROUP BY shown
