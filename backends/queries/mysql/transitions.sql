-- MySQL/MariaDB state transitions on one job table {table} (columns in common/jobs.sql).
-- Each transition is one guarded statement (expected state and claim in the WHERE clause), so
-- a transition whose guard does not hold changes nothing; connections use CLIENT.FOUND_ROWS,
-- so row counts are rows matched. :now is the shard clock: the server's NOW(3) plus the
-- shard's clock offset, read inside the statement where a call is one statement (schema.sql
-- statement_clock), else read once per transaction (server_now).
-- MySQL evaluates SET assignments left to right on the updated row: no assignment reads a
-- column assigned before it (attempts_remaining always comes last).
-- Status truncation keeps the newest :cap characters: RIGHT() when appending, LEFT() when
-- prepending (SUBSTRING(s, -n) would return '' for strings shorter than n).
-- Bounded statements use single-table UPDATE/DELETE ... ORDER BY <index order> LIMIT, which
-- walks the index (MySQL allows neither LIMIT in an IN-subquery nor a subquery on the table
-- being updated).
-- Claims and sources compare as binary strings: utf8mb4_bin is a PAD SPACE collation, under
-- which 'worker:host1 ' would equal 'worker:host1' (fencing is exact equality, semantics.md).

-- name: dequeue_select
-- Eligible PENDING jobs, oldest run_after first then by id, and the time they were judged by:
-- a dry run's (claims use claim_select). Under a {lock} of FOR UPDATE SKIP LOCKED the rows
-- would stay locked for a claim_by_ids in the same transaction, and rows another dequeuer
-- holds would be skipped (servers without SKIP LOCKED: FOR UPDATE, waited for). ORDER BY
-- must be the `ready` index order: ordering by anything else makes InnoDB filesort (and a
-- locking read lock every candidate). Run with the statement clock (sql_base.py): the `now`
-- column hands a claim the very time eligibility was judged by, so the clock costs no round
-- trip of its own. The body only when at most :inline bytes long (its length always).
SELECT local_id, CASE WHEN LENGTH(body) <= :inline THEN body END AS body, LENGTH(body),
       attempts_allowed, attempts_remaining, :now AS now
FROM {table} FORCE INDEX (ready)
WHERE state = 0 AND run_after <= :now
ORDER BY state, run_after, local_id
LIMIT :limit
{lock}

-- name: claim_select
-- What a claim selects first (mysql.py MySQLShard._claim_eligible): dequeue_select's rows,
-- but the index walk reads the first :candidates eligible ids without locks (a derived
-- table), and only the rows taken are locked, through the primary key, in that order: a
-- locking read of the `ready` index made InnoDB check every entry it passed for implicit
-- locks (a clustered-record and undo lookup each), MariaDB's dearest statement of a claim. A
-- candidate another dequeuer holds is skipped ({lock} SKIP LOCKED), one claimed and committed
-- since the walk no longer passes `state = 0`; a claim left short reads a wider window next
-- (its own claimed rows are no candidates then). STRAIGHT_JOIN and ORDER BY on the
-- candidates' columns keep their order (a sort of the candidates, then the joins up to
-- :limit, which stop there: rows past it are neither read nor locked).
SELECT j.local_id, CASE WHEN LENGTH(j.body) <= :inline THEN j.body END AS body,
       LENGTH(j.body), j.attempts_allowed, j.attempts_remaining, :now AS now
FROM (SELECT local_id, run_after FROM {table} FORCE INDEX (ready)
      WHERE state = 0 AND run_after <= :now
      ORDER BY state, run_after, local_id
      LIMIT :candidates) AS c
STRAIGHT_JOIN {table} AS j ON j.local_id = c.local_id
WHERE j.state = 0 AND j.run_after <= :now
ORDER BY c.run_after, c.local_id
LIMIT :limit
{lock}

-- name: ack_success
-- IN_PROGRESS jobs with a matching claim -> SUCCEEDED; append status; the claim stays for
-- lookups. One statement per group of acks sharing status and claim (pinlater/storage/acks.py).
-- A reserved job (prefetched, its hand-out not written yet) is acked as a handed-out one, also
-- under a claim with its reservation's token (a broker's hand-out claim, R-broker-claim), which
-- then becomes its claim; every ack and checkpoint ends its reservation.
UPDATE {table}
SET state = 2,
    custom_status = RIGHT(CONCAT(custom_status, :status), :cap),
    claim = COALESCE(:claim, claim),
    updated_at = :now,
    reserved_until = NULL
WHERE local_id IN ({ids}) AND state = 1
  AND (CAST(claim AS BINARY) = CAST(:claim AS BINARY)
       OR (:claim IS NULL
           AND CAST(SUBSTRING(claim, :source_pos) AS BINARY) = CAST(:source AS BINARY))
       OR (reserved_until IS NOT NULL
           AND CAST(LEFT(claim, :token_len) AS BINARY) = CAST(LEFT(:claim, :token_len) AS BINARY)))

-- name: ack_failure_retry
-- IN_PROGRESS jobs with a matching claim and more than one attempt left -> PENDING (one
-- attempt used, run_after = :now + :delay, claim cleared); append status. ack_failure_final
-- takes the others of the same acks, so the ledger counts retried and failed apart.
UPDATE {table}
SET state = 0,
    run_after = :now + :delay,
    claim = NULL,
    custom_status = RIGHT(CONCAT(custom_status, :status), :cap),
    updated_at = :now,
    reserved_until = NULL,
    attempts_remaining = attempts_remaining - 1
WHERE local_id IN ({ids}) AND state = 1 AND attempts_remaining > 1
  AND (CAST(claim AS BINARY) = CAST(:claim AS BINARY)
       OR (:claim IS NULL
           AND CAST(SUBSTRING(claim, :source_pos) AS BINARY) = CAST(:source AS BINARY))
       OR (reserved_until IS NOT NULL
           AND CAST(LEFT(claim, :token_len) AS BINARY) = CAST(LEFT(:claim, :token_len) AS BINARY)))

-- name: ack_failure_final
-- IN_PROGRESS jobs with a matching claim and at most one attempt left -> FAILED with none
-- left; append status; the claim stays for lookups.
UPDATE {table}
SET state = 3,
    custom_status = RIGHT(CONCAT(custom_status, :status), :cap),
    claim = COALESCE(:claim, claim),
    updated_at = :now,
    reserved_until = NULL,
    attempts_remaining = 0
WHERE local_id IN ({ids}) AND state = 1 AND attempts_remaining <= 1
  AND (CAST(claim AS BINARY) = CAST(:claim AS BINARY)
       OR (:claim IS NULL
           AND CAST(SUBSTRING(claim, :source_pos) AS BINARY) = CAST(:source AS BINARY))
       OR (reserved_until IS NOT NULL
           AND CAST(LEFT(claim, :token_len) AS BINARY) = CAST(LEFT(:claim, :token_len) AS BINARY)))

-- name: checkpoint
-- IN_PROGRESS with a matching claim: new state (:state 1 stays, 0 moves to PENDING and clears
-- the claim), run_after, optional body and attempts, prepended status; updated_at = :now.
UPDATE {table}
SET state = :state,
    run_after = COALESCE(:run_after, :now),
    body = COALESCE(:body, body),
    attempts_allowed = COALESCE(:attempts, attempts_allowed),
    custom_status = LEFT(CONCAT(:status, custom_status), :cap),
    claim = CASE WHEN :state = 0 THEN NULL ELSE COALESCE(:claim, claim) END,
    updated_at = :now,
    reserved_until = NULL,
    attempts_remaining = COALESCE(:attempts, attempts_remaining)
WHERE local_id = :id AND state = 1
  AND (CAST(claim AS BINARY) = CAST(:claim AS BINARY)
       OR (:claim IS NULL
           AND CAST(SUBSTRING(claim, :source_pos) AS BINARY) = CAST(:source AS BINARY))
       OR (reserved_until IS NOT NULL
           AND CAST(LEFT(claim, :token_len) AS BINARY) = CAST(LEFT(:claim, :token_len) AS BINARY)))

-- name: retry_failed
-- Up to :limit FAILED jobs, oldest run_after first, back to PENDING with :remaining attempts.
UPDATE {table}
SET state = 0, run_after = COALESCE(:run_after, :now), claim = NULL, updated_at = :now,
    attempts_remaining = :remaining
WHERE state = 3
ORDER BY state, run_after, local_id
LIMIT :limit

-- name: hand_out_by_ids
-- overrides: claims compare as binary strings (see the top of this file)
-- Reserved jobs still held under the prefetch claim :claim become ordinary claims from :now
-- (the claim timeout counts from here), under :new_claim when given.
UPDATE {table}
SET claim = COALESCE(:new_claim, claim), updated_at = :now, reserved_until = NULL
WHERE local_id IN ({ids}) AND state = 1 AND reserved_until IS NOT NULL
  AND CAST(claim AS BINARY) = CAST(:claim AS BINARY)

-- name: release_by_ids
-- overrides: claims compare as binary strings (see the top of this file)
-- Reserved jobs still held under :claim back to PENDING, nothing used: run_after and
-- attempts unchanged, claim cleared, updated_at unchanged (S-prefetch).
UPDATE {table}
SET state = 0, claim = NULL, reserved_until = NULL
WHERE local_id IN ({ids}) AND state = 1 AND reserved_until IS NOT NULL
  AND CAST(claim AS BINARY) = CAST(:claim AS BINARY)

-- name: reclaim_reserved
-- Up to :limit reserved jobs whose deadline passed (a broker that died with them) back to
-- PENDING with nothing used, as release_by_ids does; walks the `reserved` index, which holds
-- reservations alone (every other job's reserved_until is NULL). FORCE INDEX: with the state
-- in the WHERE clause the planner may take `updated` and sort every claim of the table.
UPDATE {table} FORCE INDEX (reserved)
SET state = 0, claim = NULL, reserved_until = NULL
WHERE reserved_until < :now AND state = 1
ORDER BY reserved_until
LIMIT :limit

-- name: reclaim_fail
-- Up to :limit expired IN_PROGRESS jobs (updated_at < :cutoff) with one attempt or fewer left
-- -> FAILED with none left; reserved jobs are not subject to the claim timeout.
UPDATE {table}
SET state = 3, updated_at = :now, attempts_remaining = 0
WHERE state = 1 AND updated_at < :cutoff AND attempts_remaining <= 1
  AND reserved_until IS NULL
ORDER BY state, updated_at
LIMIT :limit

-- name: reclaim_retry
-- Up to :limit expired IN_PROGRESS jobs with attempts left -> PENDING now, one attempt used,
-- claim cleared.
UPDATE {table}
SET state = 0, run_after = :now, claim = NULL, updated_at = :now,
    attempts_remaining = attempts_remaining - 1
WHERE state = 1 AND updated_at < :cutoff AND attempts_remaining > 1
  AND reserved_until IS NULL
ORDER BY state, updated_at
LIMIT :limit

-- name: purge
-- Delete up to :limit jobs in terminal :state last updated before :cutoff.
DELETE FROM {table}
WHERE state = :state AND updated_at < :cutoff
ORDER BY state, updated_at
LIMIT :limit

-- name: delete_by_state
-- Delete up to :limit jobs in :state, oldest run_after first then by id; reserved jobs are
-- PENDING to reads and deletes (delete_reserved), not IN_PROGRESS (S-prefetch).
DELETE FROM {table}
WHERE state = :state AND reserved_until IS NULL
ORDER BY state, run_after, local_id
LIMIT :limit
