-- SQLite state transitions on one job table {table} (see the column list in common/jobs.sql).
-- Each transition is one guarded statement: the expected state (and claim) is in the WHERE
-- clause, so a transition whose guard does not hold changes nothing. :now is the shard clock in
-- epoch ms, read once per primitive call. Status truncation keeps the newest :cap characters.
-- SET clauses never read a column assigned earlier in the same clause (MySQL evaluates SET
-- left to right; keeping attempts_remaining last keeps a port of these statements correct).
-- Bounded statements pick their rows in a LIMITed subquery that carries the guard; the outer
-- `+state` repeats it without letting the planner scan a state index instead of the id list.

-- name: dequeue_select
-- Eligible PENDING jobs, oldest run_after first then by id, and the time they were judged by
-- (claimed next by claim_by_ids; a write transaction holds SQLite's database lock, so no row
-- lock is needed). The body only when at most :inline bytes long (its length always; SQLite
-- reads a blob's length without its overflow pages).
SELECT local_id, CASE WHEN LENGTH(body) <= :inline THEN body END AS body, LENGTH(body),
       attempts_allowed, attempts_remaining, :now AS now
FROM {table}
WHERE state = 0 AND run_after <= :now
ORDER BY run_after, local_id
LIMIT :limit

-- name: ack_success
-- IN_PROGRESS jobs with a matching claim -> SUCCEEDED; append status; the claim stays for
-- lookups. One statement per group of acks sharing status and claim (pinlater/storage/acks.py).
-- A reserved job (prefetched, its hand-out not written yet) is acked as a handed-out one, also
-- under a claim with its reservation's token (a broker's hand-out claim, R-broker-claim), which
-- then becomes its claim; every ack and checkpoint ends its reservation.
UPDATE {table}
SET state = 2,
    custom_status = substr(custom_status || :status, -:cap),
    claim = COALESCE(:claim, claim),
    updated_at = :now,
    reserved_until = NULL
WHERE local_id IN ({ids}) AND +state = 1
  AND (claim = :claim OR (:claim IS NULL AND substr(claim, :source_pos) = :source)
       OR (reserved_until IS NOT NULL AND substr(claim, 1, :token_len) = substr(:claim, 1, :token_len)))

-- name: ack_failure_retry
-- IN_PROGRESS jobs with a matching claim and more than one attempt left -> PENDING (one
-- attempt used, run_after = :now + :delay, claim cleared); append status. ack_failure_final
-- takes the others of the same acks, so the ledger counts retried and failed apart.
UPDATE {table}
SET state = 0,
    run_after = :now + :delay,
    claim = NULL,
    custom_status = substr(custom_status || :status, -:cap),
    updated_at = :now,
    reserved_until = NULL,
    attempts_remaining = attempts_remaining - 1
WHERE local_id IN ({ids}) AND +state = 1 AND attempts_remaining > 1
  AND (claim = :claim OR (:claim IS NULL AND substr(claim, :source_pos) = :source)
       OR (reserved_until IS NOT NULL AND substr(claim, 1, :token_len) = substr(:claim, 1, :token_len)))

-- name: ack_failure_final
-- IN_PROGRESS jobs with a matching claim and at most one attempt left -> FAILED with none
-- left; append status; the claim stays for lookups.
UPDATE {table}
SET state = 3,
    custom_status = substr(custom_status || :status, -:cap),
    claim = COALESCE(:claim, claim),
    updated_at = :now,
    reserved_until = NULL,
    attempts_remaining = 0
WHERE local_id IN ({ids}) AND +state = 1 AND attempts_remaining <= 1
  AND (claim = :claim OR (:claim IS NULL AND substr(claim, :source_pos) = :source)
       OR (reserved_until IS NOT NULL AND substr(claim, 1, :token_len) = substr(:claim, 1, :token_len)))

-- name: checkpoint
-- IN_PROGRESS with a matching claim: new state (:state 1 stays, 0 moves to PENDING and clears
-- the claim), run_after, optional body and attempts, prepended status; updated_at = :now.
UPDATE {table}
SET state = :state,
    run_after = COALESCE(:run_after, :now),
    body = COALESCE(:body, body),
    attempts_allowed = COALESCE(:attempts, attempts_allowed),
    custom_status = substr(:status || custom_status, 1, :cap),
    claim = CASE WHEN :state = 0 THEN NULL ELSE COALESCE(:claim, claim) END,
    updated_at = :now,
    reserved_until = NULL,
    attempts_remaining = COALESCE(:attempts, attempts_remaining)
WHERE local_id = :id AND state = 1
  AND (claim = :claim OR (:claim IS NULL AND substr(claim, :source_pos) = :source)
       OR (reserved_until IS NOT NULL AND substr(claim, 1, :token_len) = substr(:claim, 1, :token_len)))

-- name: retry_failed
-- Up to :limit FAILED jobs, oldest run_after first, back to PENDING with :remaining attempts.
UPDATE {table}
SET state = 0, run_after = COALESCE(:run_after, :now), claim = NULL, updated_at = :now,
    attempts_remaining = :remaining
WHERE +state = 3 AND local_id IN (
    SELECT local_id FROM {table} WHERE state = 3 ORDER BY run_after, local_id LIMIT :limit)

-- name: reclaim_reserved
-- Up to :limit reserved jobs whose deadline passed (a broker that died with them) back to
-- PENDING with nothing used, as release_by_ids (common/jobs.sql) does.
UPDATE {table}
SET state = 0, claim = NULL, reserved_until = NULL
WHERE +state = 1 AND local_id IN (
    SELECT local_id FROM {table}
    WHERE reserved_until < :now
    ORDER BY reserved_until LIMIT :limit)

-- name: reclaim_fail
-- Up to :limit expired IN_PROGRESS jobs (updated_at < :cutoff) with one attempt or fewer left
-- -> FAILED with none left; reserved jobs are not subject to the claim timeout.
UPDATE {table}
SET state = 3, updated_at = :now, attempts_remaining = 0
WHERE +state = 1 AND local_id IN (
    SELECT local_id FROM {table}
    WHERE state = 1 AND updated_at < :cutoff AND attempts_remaining <= 1
      AND reserved_until IS NULL
    ORDER BY updated_at LIMIT :limit)

-- name: reclaim_retry
-- Up to :limit expired IN_PROGRESS jobs with attempts left -> PENDING now, one attempt used,
-- claim cleared.
UPDATE {table}
SET state = 0, run_after = :now, claim = NULL, updated_at = :now,
    attempts_remaining = attempts_remaining - 1
WHERE +state = 1 AND local_id IN (
    SELECT local_id FROM {table}
    WHERE state = 1 AND updated_at < :cutoff AND attempts_remaining > 1
      AND reserved_until IS NULL
    ORDER BY updated_at LIMIT :limit)

-- name: purge
-- Delete up to :limit jobs in terminal :state last updated before :cutoff.
DELETE FROM {table}
WHERE +state = :state AND local_id IN (
    SELECT local_id FROM {table}
    WHERE state = :state AND updated_at < :cutoff ORDER BY updated_at LIMIT :limit)

-- name: delete_by_state
-- Delete up to :limit jobs in :state, oldest run_after first then by id; reserved jobs are
-- PENDING to reads and deletes (delete_reserved), not IN_PROGRESS (S-prefetch).
DELETE FROM {table}
WHERE +state = :state AND local_id IN (
    SELECT local_id FROM {table} WHERE state = :state AND reserved_until IS NULL
    ORDER BY run_after, local_id LIMIT :limit)
