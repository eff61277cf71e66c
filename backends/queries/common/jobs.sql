-- Dialect-neutral job queries shared by SQLite and MySQL (backends/sql_base.py runs them).
-- Tables: {table} = one job table (one queue, one priority), columns:
--   local_id, state (0 PENDING, 1 IN_PROGRESS, 2 SUCCEEDED, 3 FAILED), claim, attempts_allowed,
--   attempts_remaining, custom_status, created_at, updated_at, run_after (epoch ms), body,
--   reserved_until: the deadline of a job a prefetching broker reserved (IN_PROGRESS, not yet
--   handed out); NULL for every other job: every transition out of a reservation clears it, so
--   the (reserved_until) index holds reservations alone (SQLite: a partial index).
-- Parameters are written `:name` and converted to the dialect's style when loaded; `{ids}`
-- expands to a list of bound id parameters. A dialect file adds the queries this file lacks;
-- it replaces one of these only with an `-- overrides: <reason>` line (else loading fails).
-- `+state` keeps SQLite's planner on the primary key instead of a state index; MySQL ignores
-- the unary plus (same plan either way).

-- name: enqueue_insert
-- Store one new PENDING job; a NULL :run_after means now (the dialect's `_insert_jobs` sends
-- the rows and reads their ids back). :unclaimed is NULL, or the room a dialect reserves for
-- the claim (sql_base.CLAIM_ROOM, read back as no claim).
INSERT INTO {table}
    (state, claim, attempts_allowed, attempts_remaining, custom_status,
     created_at, updated_at, run_after, body)
VALUES (0, :unclaimed, :attempts, :attempts, :status, :now, :now, COALESCE(:run_after, :now),
        :body)

-- name: claim_by_ids
-- Move the PENDING jobs just selected by dequeue_select to IN_PROGRESS under one claim; a
-- prefetch reserves them until :until (a dequeue's :until is NULL: an ordinary claim) and
-- keeps their updated_at: reads show a reserved job as the PENDING job it was (S-prefetch).
UPDATE {table}
SET state = 1, claim = :claim, reserved_until = :until,
    updated_at = CASE WHEN :until IS NULL THEN :now ELSE updated_at END
WHERE local_id IN ({ids}) AND +state = 0

-- name: hand_out_by_ids
-- Reserved jobs still held under the prefetch claim :claim become ordinary claims from :now
-- (the claim timeout counts from here), under :new_claim when given.
UPDATE {table}
SET claim = COALESCE(:new_claim, claim), updated_at = :now, reserved_until = NULL
WHERE local_id IN ({ids}) AND +state = 1 AND reserved_until IS NOT NULL AND claim = :claim

-- name: release_by_ids
-- Reserved jobs still held under :claim back to PENDING, nothing used: run_after and
-- attempts unchanged (they keep their place in dequeue order), claim cleared, updated_at
-- unchanged (the reservation never showed: S-prefetch).
UPDATE {table}
SET state = 0, claim = NULL, reserved_until = NULL
WHERE local_id IN ({ids}) AND +state = 1 AND reserved_until IS NOT NULL AND claim = :claim

-- name: reserved_by_ids
-- (local_id, claim) of the given jobs that are reserved: an ack or checkpoint applying to one
-- counts it as dequeued (the ledger counts a reservation when it is handed out, S-prefetch).
SELECT local_id, claim
FROM {table}
WHERE local_id IN ({ids}) AND reserved_until IS NOT NULL

-- name: lookup_by_ids
-- Full records of the given jobs (a reserved job reads as PENDING without a claim, S-prefetch); when :with_body is 1, the body's length and the body itself
-- if it is at most :inline bytes long (longer ones are read by bodies_by_ids, if they fit).
SELECT local_id, CASE WHEN reserved_until IS NULL THEN state ELSE 0 END AS state,
       attempts_allowed, attempts_remaining, custom_status,
       created_at, run_after, updated_at, CASE WHEN reserved_until IS NULL THEN claim END AS claim,
       CASE WHEN :with_body = 1 AND LENGTH(body) <= :inline THEN body END AS body,
       CASE WHEN :with_body = 1 THEN LENGTH(body) END AS body_size
FROM {table}
WHERE local_id IN ({ids})

-- name: bodies_by_ids
-- (local_id, body) of the given jobs: the bodies a dequeue or lookup hands out that its first
-- select left out for their length.
SELECT local_id, body
FROM {table}
WHERE local_id IN ({ids})

-- name: count_current
-- Jobs in :state with run_after <= :now, counted exactly up to :cap; :reserved 1 counts the
-- reserved jobs of :state 1 (which reads show as PENDING, S-prefetch), 0 the others.
SELECT COUNT(*) FROM (
    SELECT 1 FROM {table}
    WHERE state = :state AND (reserved_until IS NOT NULL) = :reserved AND run_after <= :now
    LIMIT :cap
) AS capped

-- name: count_future
-- Jobs in :state with run_after > :now, counted exactly up to :cap.
SELECT COUNT(*) FROM (
    SELECT 1 FROM {table}
    WHERE state = :state AND (reserved_until IS NOT NULL) = :reserved AND run_after > :now
    LIMIT :cap
) AS capped

-- name: table_stats
-- One job table as one row of `Shard.queue_stats` (which joins one such select per table with
-- UNION ALL, `{part}` being each one's bound number): jobs per state due (run_after <= :now)
-- and future, each counted exactly up to :cap, then the oldest updated_at of IN_PROGRESS,
-- SUCCEEDED and FAILED jobs (NULL when none; the updated_at index makes each one a seek), then
-- the earliest reservation deadline (the reserved_until index: a seek), then the reserved jobs
-- due and future: reads count them as PENDING, not IN_PROGRESS (S-prefetch; sql_base adds
-- them to state 0's counts, capped).
SELECT {part} AS part,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 0 AND run_after <= :now LIMIT :cap) AS c) AS due0,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 0 AND run_after > :now LIMIT :cap) AS c) AS future0,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 1 AND reserved_until IS NULL AND run_after <= :now LIMIT :cap) AS c) AS due1,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 1 AND reserved_until IS NULL AND run_after > :now LIMIT :cap) AS c) AS future1,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 2 AND run_after <= :now LIMIT :cap) AS c) AS due2,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 2 AND run_after > :now LIMIT :cap) AS c) AS future2,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 3 AND run_after <= :now LIMIT :cap) AS c) AS due3,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = 3 AND run_after > :now LIMIT :cap) AS c) AS future3,
    (SELECT MIN(updated_at) FROM {table} WHERE state = 1 AND reserved_until IS NULL) AS oldest1,
    (SELECT MIN(updated_at) FROM {table} WHERE state = 2) AS oldest2,
    (SELECT MIN(updated_at) FROM {table} WHERE state = 3) AS oldest3,
    (SELECT MIN(reserved_until) FROM {table} WHERE reserved_until IS NOT NULL) AS reserve_due,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE reserved_until IS NOT NULL AND run_after <= :now LIMIT :cap) AS c) AS due_reserved,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE reserved_until IS NOT NULL AND run_after > :now LIMIT :cap) AS c) AS future_reserved

-- name: table_ages
-- As table_stats without the counts (`queue_stats` with cap 0, the janitor's read): the oldest
-- updated_at of IN_PROGRESS, SUCCEEDED and FAILED jobs and the earliest reservation deadline.
SELECT {part} AS part,
    (SELECT MIN(updated_at) FROM {table} WHERE state = 1 AND reserved_until IS NULL) AS oldest1,
    (SELECT MIN(updated_at) FROM {table} WHERE state = 2) AS oldest2,
    (SELECT MIN(updated_at) FROM {table} WHERE state = 3) AS oldest3,
    (SELECT MIN(reserved_until) FROM {table} WHERE reserved_until IS NOT NULL) AS reserve_due

-- name: scan_current
-- One page of jobs in :state with run_after <= :now strictly after the bound
-- (:ra, :id) in (run_after DESC, local_id DESC) order; the body only when :with_body is 1.
-- :reserved as in count_current (sql_base merges the reserved page into PENDING's).
SELECT local_id, CASE WHEN reserved_until IS NULL THEN state ELSE 0 END AS state,
       attempts_allowed, attempts_remaining, custom_status,
       created_at, run_after, updated_at, CASE WHEN reserved_until IS NULL THEN claim END AS claim,
       CASE WHEN :with_body = 1 THEN body END AS body
FROM {table}
WHERE state = :state AND (reserved_until IS NOT NULL) = :reserved AND run_after <= :now
  AND run_after <= :ra AND (run_after < :ra OR local_id < :id)
ORDER BY run_after DESC, local_id DESC
LIMIT :limit

-- name: scan_future
-- As scan_current, for jobs with run_after > :now.
SELECT local_id, CASE WHEN reserved_until IS NULL THEN state ELSE 0 END AS state,
       attempts_allowed, attempts_remaining, custom_status,
       created_at, run_after, updated_at, CASE WHEN reserved_until IS NULL THEN claim END AS claim,
       CASE WHEN :with_body = 1 THEN body END AS body
FROM {table}
WHERE state = :state AND (reserved_until IS NOT NULL) = :reserved AND run_after > :now
  AND run_after <= :ra AND (run_after < :ra OR local_id < :id)
ORDER BY run_after DESC, local_id DESC
LIMIT :limit

-- name: page_by_state
-- One page of (local_id, run_after, body) of jobs in :state strictly after (:ra, :id) in
-- (run_after, local_id) order (deleteJobs with a body filter examines these in Python).
SELECT local_id, run_after, body
FROM {table}
WHERE state = :state AND run_after >= :ra AND (run_after > :ra OR local_id > :id)
ORDER BY run_after, local_id
LIMIT :limit

-- name: delete_by_ids
-- Delete the given jobs if they are still in :state as reads show it (a reserved job is
-- PENDING, S-prefetch; `+state`: look them up by primary key).
DELETE FROM {table}
WHERE local_id IN ({ids}) AND CASE WHEN reserved_until IS NULL THEN state ELSE 0 END = :state

-- name: reserved_bodies
-- (local_id, body) of the reserved jobs (few: brokers' buffers), which a body-filtered delete
-- of PENDING jobs examines first (they read as PENDING, S-prefetch).
SELECT local_id, body FROM {table} WHERE reserved_until IS NOT NULL ORDER BY run_after, local_id

-- name: delete_reserved
-- Delete up to :limit reserved jobs (PENDING to reads and deletes, S-prefetch): a deleteJobs
-- of PENDING jobs takes them first (a prefetch took them in dequeue order, oldest first).
DELETE FROM {table}
WHERE local_id IN (
    SELECT local_id FROM (
        SELECT local_id FROM {table} WHERE reserved_until IS NOT NULL LIMIT :limit
    ) AS reserved)

-- name: next_due
-- The earliest run_after of the table's PENDING jobs (NULL when none): one index seek on the
-- (state, run_after, local_id) index. The long-poll watcher asks this instead of a dequeue.
SELECT MIN(run_after) FROM {table} WHERE state = 0

-- name: fifo_in_flight
-- A FIFO queue's IN_PROGRESS jobs of one priority (backends/sql_fifo.py adds the priorities).
SELECT COUNT(*) FROM {table} WHERE state = 1

-- name: fifo_heads
-- A FIFO queue's heads of one priority: its first :limit PENDING jobs in local id (enqueue)
-- order, due or not (the first one not due ends the priority), the body only when at most
-- :inline bytes long (its length always). {lock} is the dialect's FIFO row lock (MySQL: FOR
-- UPDATE, never SKIP LOCKED: a head another transaction holds is waited for, not skipped).
SELECT local_id, CASE WHEN LENGTH(body) <= :inline THEN body END AS body, LENGTH(body),
       attempts_allowed, attempts_remaining, run_after
FROM {table}
WHERE state = 0
ORDER BY local_id
LIMIT :limit
{lock}
