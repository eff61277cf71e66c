-- The per-queue ledger shared by SQLite and MySQL (backends/sql_base.py; the counters are
-- listed in pinlater/storage/ledger.py). {table} = one queue's ledger table on the shard, one
-- row per slot: a write adds to one slot's row, the last statement of its transaction (a
-- dialect with row locks spreads writers over several slots in turn, so concurrent writers
-- seldom wait for each other, and never while holding a lock they could deadlock on); a read
-- sums the slots.
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
-- Jobs per state in one job table (read in the same snapshot as ledger_read).
SELECT state, COUNT(*) FROM {table} GROUP BY state
