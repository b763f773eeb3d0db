-- Every statement jobctl runs against the jobs table, one place each.
-- A block starts with a line "-- name: NAME" and one or more comment lines saying what it
-- does; it ends where the next "-- name:" line starts. %(x)s are parameters; {other_block}
-- pulls a fragment in; the rest of the braces speak the table's own terms (db.spelling):
-- {table} is the jobs table, {status} (any of the lease design's column names) the table's
-- column playing that part, {queued} (any design status, and {parked}) the table's value cast
-- to the status column's type, {id_type} the id column's type. Ids come in as text, cast by
-- the database (%(id)s::text::{id_type}); statuses go out as text; output keeps the design's
-- names as column names (AS status), written by the type's output function (status_text).
-- The writes (reclaim_batch, manual_requeue, manual_fail, manual_cancel, set_policy) and
-- every block they include run under the session's own search_path after pg_catalog
-- (write_search_path): in them every operator is OPERATOR(pg_catalog.x), every function
-- pg_catalog.f, and nothing looks an operator up by name (IS DISTINCT FROM, IN, NOT IN,
-- nullif, BETWEEN, LIKE, a row comparison); tests/unit/test_sql_search_path.py holds them
-- to it.

-- name: reclaim_action
-- the reclaim decision; the only place it is written (in the writes: every operator and
-- function named with its schema, tests/unit/test_sql_search_path.py). Requeue only a job
-- whose effective policy is auto (effective_policy) with attempts left (attempts_remain); fail
-- (park) the rest
CASE WHEN {effective_policy} OPERATOR(pg_catalog.=) 'auto'::pg_catalog.text
          AND {attempts_remain}
          -- reclaim --park-older-than: an orphan claimed longer ago than that is parked for
          -- review, not run again (an unknown claim time is not judged old)
          AND (%(park_older_than)s::pg_catalog.interval IS NULL OR j.{reserved_at} IS NULL
               OR {j_reserved_at_time} OPERATOR(pg_catalog.>=)
                  (pg_catalog.now()
                   OPERATOR(pg_catalog.-) %(park_older_than)s::pg_catalog.interval))
     THEN 'requeue'::pg_catalog.text ELSE 'fail'::pg_catalog.text END

-- name: attempts_remain
-- whether a job has attempts left, the one judgement every statement reads (worker_fail's retry,
-- reclaim's action, review's why): fewer attempts than max_attempts, or a max_attempts the
-- table's mapping says means no limit ({unlimited_attempts}: OR j.max_attempts = that value,
-- recorded by schema apply --unlimited-max-attempts; empty when every value is a limit). The
-- row is j (in the writes too: every operator named with its schema)
(j.{attempts} OPERATOR(pg_catalog.<) j.{max_attempts}{unlimited_attempts})

-- name: effective_policy
-- the policy that applies to a job, the one judgement every command reads (reclaim's action,
-- stuck, review's why, summary, metrics, report, explain, top): auto only when its row says
-- auto and no recorded policy makes its kind or queue manual ({kind_manual}: manual wins);
-- manual otherwise (a row policy jobctl does not know is not auto, as reclaim has always read it)
CASE WHEN j.{recovery_policy} OPERATOR(pg_catalog.=) 'auto'::pg_catalog.text AND NOT {kind_manual}
     THEN 'auto'::pg_catalog.text ELSE 'manual'::pg_catalog.text END

-- name: policy_source
-- where a job's effective policy comes from: its row (its recovery_policy), or the kind or
-- queue whose recorded policy makes it manual ({kind_policy_source}: kind_policy_of where the
-- table maps a kind or queue and records policies; 'row' when none does)
CASE WHEN j.{recovery_policy} OPERATOR(pg_catalog.=) 'manual'::pg_catalog.text
     THEN 'row'::pg_catalog.text
     ELSE coalesce({kind_policy_source}, 'row'::pg_catalog.text) END

-- name: kind_policy_of
-- the dimension (kind, queue) whose recorded policy makes this job manual, or NULL
-- ({policy_table}: the jobs table as jobctl.kind_policies names it)
(SELECT p.dimension FROM jobctl.kind_policies p
 WHERE p.job_table OPERATOR(pg_catalog.=) {policy_table}
   AND p.policy OPERATOR(pg_catalog.=) 'manual'::pg_catalog.text
   AND ((p.dimension OPERATOR(pg_catalog.=) 'kind'::pg_catalog.text
         AND p.value OPERATOR(pg_catalog.=) {kind_value})
        OR (p.dimension OPERATOR(pg_catalog.=) 'queue'::pg_catalog.text
            AND p.value OPERATOR(pg_catalog.=) {queue_value}))
 ORDER BY p.dimension LIMIT 1)

-- name: policy_columns
-- a job's policy in a row's select list: the effective policy (effective_policy) and where
-- it comes from (policy_source), beside the row's own recovery_policy
{effective_policy} AS effective_policy, {policy_source} AS policy_from,

-- name: kind_policy_set
-- jobctl policy --kind K --manual|--auto: the table's policy for a kind or queue, recorded
-- with who and why, and the change beside it (one statement: both or neither)
WITH set AS (
    INSERT INTO jobctl.kind_policies AS p (job_table, dimension, value, policy, reason, actor)
    VALUES (%(job_table)s, %(dimension)s, %(value)s, %(policy)s, %(reason)s,
            pg_catalog.current_setting('jobctl.actor', true))
    ON CONFLICT (job_table, dimension, value) DO UPDATE
    SET policy = EXCLUDED.policy, reason = EXCLUDED.reason, actor = EXCLUDED.actor,
        db_role = EXCLUDED.db_role, set_at = EXCLUDED.set_at
    RETURNING p.job_table, p.dimension, p.value, p.policy, p.reason, p.actor
)
INSERT INTO jobctl.kind_policy_events (job_table, dimension, value, policy, reason, actor)
SELECT set.job_table, set.dimension, set.value, set.policy, set.reason, set.actor FROM set
RETURNING dimension, value, policy

-- name: kind_policy_remove
-- jobctl policy --kind K --remove: the kind's policy gone (its jobs' rows decide again), and
-- the change recorded
WITH gone AS (
    DELETE FROM jobctl.kind_policies p
    WHERE p.job_table OPERATOR(pg_catalog.=) %(job_table)s
      AND p.dimension OPERATOR(pg_catalog.=) %(dimension)s
      AND p.value OPERATOR(pg_catalog.=) %(value)s
    RETURNING p.job_table, p.dimension, p.value
)
INSERT INTO jobctl.kind_policy_events (job_table, dimension, value, policy, reason, actor)
SELECT gone.job_table, gone.dimension, gone.value, NULL, %(reason)s,
       pg_catalog.current_setting('jobctl.actor', true)
FROM gone
RETURNING dimension, value

-- name: kind_policy_list
-- the table's policies per kind and queue, as recorded
SELECT p.dimension, p.value, p.policy, p.reason, p.actor, p.db_role, p.set_at
FROM jobctl.kind_policies p WHERE p.job_table = %(job_table)s
ORDER BY p.dimension, p.value

-- name: job_paused
-- is this job's (j) kind or queue paused for its table (jobctl pause): the one truth every
-- statement reads, the workers' claim first ({pause_keys}: the table's pauses as keys, the
-- block pause_keys, or lease.Worker's copy of them read at most a second ago, a parameter;
-- {paused} where a block includes it: false when nothing can be paused). Each job's kind and
-- queue (job_pause_keys) compared with the table's pauses in memory: the cheapest form to
-- plan, which an unprepared claim pays on every call (tests/bench/bench_pause.py). Read in
-- the workers' claim under their search_path: every operator named with its schema
({job_pause_keys}
 OPERATOR(pg_catalog.&&)
 {pause_keys})

-- name: job_pause_keys
-- a job's (j) kind and queue as pause keys ('kind:charge_card', 'queue:billing'; {kind_value},
-- {queue_value}: NULL when unmapped, and a NULL kind or queue is no pause's)
ARRAY['kind:'::pg_catalog.text OPERATOR(pg_catalog.||) {kind_value},
       'queue:'::pg_catalog.text OPERATOR(pg_catalog.||) {queue_value}]

-- name: pause_keys
-- the table's pauses as keys, as job_pause_keys spells a job's ({pause_table}: the jobs
-- table as jobctl.pauses names it): an uncorrelated subquery, read once per statement (one
-- probe of jobctl.pauses' primary key)
ARRAY(SELECT p.dimension OPERATOR(pg_catalog.||) ':'::pg_catalog.text
              OPERATOR(pg_catalog.||) p.value
       FROM jobctl.pauses p WHERE p.job_table OPERATOR(pg_catalog.=) {pause_table})

-- name: pause_keys_read
-- lease.Worker's read of the table's pauses (the block pause_keys), at most once a second:
-- its claim then passes them as a parameter (job_paused with {pause_keys} given)
SELECT {pause_keys} AS pause_keys

-- name: claim_unpaused
-- the claim's condition on pauses (the claim's {claim_pause_check}): this job's kind and
-- queue not paused ({paused}: job_paused)
AND NOT {paused}

-- name: pause_set
-- jobctl pause --kind K: the table's kind or queue paused, with who and why, and the pause
-- recorded beside it (one statement: both or neither); an existing pause is kept as it was
-- (no row back: nothing changed)
WITH set AS (
    INSERT INTO jobctl.pauses AS p (job_table, dimension, value, reason, actor)
    VALUES (%(job_table)s, %(dimension)s, %(value)s, %(reason)s,
            pg_catalog.current_setting('jobctl.actor', true))
    ON CONFLICT (job_table, dimension, value) DO NOTHING
    RETURNING p.job_table, p.dimension, p.value, p.reason, p.actor
)
INSERT INTO jobctl.pause_events (job_table, dimension, value, event, reason, actor)
SELECT set.job_table, set.dimension, set.value, 'paused', set.reason, set.actor FROM set
RETURNING dimension, value, event, reason, actor, db_role, at

-- name: pause_resume
-- jobctl resume --kind K: the pause gone (its queued jobs claimed again), and the resume
-- recorded; no row back: it was not paused
WITH gone AS (
    DELETE FROM jobctl.pauses p
    WHERE p.job_table OPERATOR(pg_catalog.=) %(job_table)s
      AND p.dimension OPERATOR(pg_catalog.=) %(dimension)s
      AND p.value OPERATOR(pg_catalog.=) %(value)s
    RETURNING p.job_table, p.dimension, p.value
)
INSERT INTO jobctl.pause_events (job_table, dimension, value, event, reason, actor)
SELECT gone.job_table, gone.dimension, gone.value, 'resumed', %(reason)s,
       pg_catalog.current_setting('jobctl.actor', true)
FROM gone
RETURNING dimension, value, event, reason, actor, db_role, at

-- name: pause_waiting
-- the table's pauses now, as every view shows them (summary, stuck, metrics, report, top):
-- who paused each, why, for how long, and how many queued jobs it holds back (the queued
-- jobs the claim passes over for it: their kind or queue is the paused value, as job_paused
-- compares them; counted through the status, as summary counts the queued), and the claims
-- of it since the pause (claims_since_pause: a worker that does not read pauses)
SELECT p.dimension, p.value, p.reason, p.actor, p.db_role, p.paused_at,
       pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) p.paused_at)
           AS paused_s,
       (SELECT count(*) FROM {table} j
        WHERE j.{status} OPERATOR(pg_catalog.=) {queued}
          AND CASE p.dimension WHEN 'kind' THEN {kind_value} ELSE {queue_value} END
              OPERATOR(pg_catalog.=) p.value) AS waiting,
       c.claims_running, c.claims_since
FROM jobctl.pauses p CROSS JOIN LATERAL ({claims_since_pause}) c
WHERE p.job_table OPERATOR(pg_catalog.=) {pause_table}
ORDER BY p.paused_at, p.dimension, p.value

-- name: claims_since_pause
-- the claims of a paused kind or queue (p: its row of jobctl.pauses) since the pause began,
-- counted from what the database holds (no pg_stat_statements): the claim jobctl gives
-- workers passes a paused kind over, so each of these is a worker that does not read pauses
-- (an older lease.Worker, one started before schema apply, or a claim of its own).
-- claims_running: its jobs whose current claim began at or after the pause (processing,
-- reserved_at at or after paused_at; through the processing index, the reclaim index's
-- predicate); claims_since: those and the ended attempts the history recorded as claimed
-- after it (the block claims_recorded_since_pause where the history's trigger records the
-- workers' attempts; NULL in its place under --history audit or with no history, where
-- they cannot be seen: ops/pause.waiting). The one count pause --list, summary, metrics, stuck, report
-- and top show, through pause_waiting: read only while something is paused
SELECT r.claims_running,
       r.claims_running OPERATOR(pg_catalog.+) {claims_recorded_since_pause} AS claims_since
FROM (SELECT count(*) AS claims_running FROM {table} j
      WHERE j.{status} OPERATOR(pg_catalog.=) {processing}
        AND {j_reserved_at_time} OPERATOR(pg_catalog.>=) p.paused_at
        AND CASE p.dimension WHEN 'kind' THEN {kind_value} ELSE {queue_value} END
            OPERATOR(pg_catalog.=) p.value) r

-- name: claims_recorded_since_pause
-- the ended attempts of a paused kind or queue (p) that the history recorded as claimed at
-- or after the pause (jobctl.attempts.claimed_at; the transitions mode records only the
-- attempts that did not complete: a claim that completed is not seen there; late and exact
-- record every one), each attempt's job read by its primary key for its kind or queue (a
-- probe per attempt since the pause, never a scan of the jobs table; the history's attempts
-- claimed since the pause found by attempts_claimed_idx, history 014)
(SELECT count(*) FROM jobctl.attempts a
 WHERE a.job_table OPERATOR(pg_catalog.=) {history_table}
   AND a.claimed_at OPERATOR(pg_catalog.>=) p.paused_at
   AND (SELECT CASE p.dimension WHEN 'kind' THEN {kind_value} ELSE {queue_value} END
        FROM {table} j WHERE j.{id} OPERATOR(pg_catalog.=) a.job_id::{id_type})
       OPERATOR(pg_catalog.=) p.value)

-- name: pause_existing
-- the table's pause of this kind or queue, if any (who, why, since when)
SELECT p.dimension, p.value, p.reason, p.actor, p.db_role, p.paused_at
FROM jobctl.pauses p
WHERE p.job_table = %(job_table)s AND p.dimension = %(dimension)s AND p.value = %(value)s

-- name: reclaim_error
-- the last_error reclaim leaves on a job
'lease expired before completion'

-- name: lease_columns
-- the columns every stuck/reclaim row reports. The status as its type's output function
-- writes it (format: no cast an application could define for its ENUM, pg_cast); the
-- worker's as text (a built-in type's cast: no other role can define one); a lease time
-- jobctl cannot use as NULL, and no arithmetic on it (lease_times_poisoned). Every text the
-- application writes (worker, kind, queue, recovery_policy) as a display shows it
-- ({shown_reserved_by} ...: display_text, cut past %(cut)s characters): reclaim_batch returns
-- these columns, so a 30 MB worker name never crosses the wire, not even from a commit.
-- {mapped_priority}: the job's priority where the table maps one, in stuck's rows (empty in
-- the others')
j.{id} AS id, {mapped_columns}{mapped_priority} {status_text} AS status,
{shown_reserved_by} AS reserved_by,
j.{attempt_token} AS attempt_token, j.{attempts} AS attempts, j.{max_attempts} AS max_attempts,
j.{reclaim_count} AS reclaim_count, {shown_recovery_policy} AS recovery_policy,
{policy_columns}
CASE WHEN {reserved_at_usable} THEN {j_reserved_at_time} END AS reserved_at,
CASE WHEN {heartbeat_at_usable} THEN j.{heartbeat_at} END AS heartbeat_at,
CASE WHEN {lease_expires_at_usable} THEN j.{lease_expires_at} END AS lease_expires_at,
CASE WHEN {lease_expires_at_usable}
     THEN pg_catalog.date_part('epoch',
                               pg_catalog.now() OPERATOR(pg_catalog.-) j.{lease_expires_at})
END AS lease_overdue_s,
CASE WHEN {heartbeat_at_usable}
     THEN pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) j.{heartbeat_at})
END AS heartbeat_age_s,
{reclaim_action} AS action

-- name: operator_filter
-- the operator's narrowing: a worker (compared as text: a uuid or integer worker id too), a
-- policy, ids; rows to pass over
(%(worker)s::pg_catalog.text IS NULL
 OR j.{reserved_by}::pg_catalog.text OPERATOR(pg_catalog.=) %(worker)s::pg_catalog.text)
AND (%(policy)s::pg_catalog.text IS NULL
     OR {effective_policy} OPERATOR(pg_catalog.=) %(policy)s::pg_catalog.text)
AND (%(ids)s::pg_catalog.text[] IS NULL
     OR j.{id} OPERATOR(pg_catalog.=) ANY(%(ids)s::pg_catalog.text[]::{id_type}[]))
AND (%(exclude)s::pg_catalog.text[] IS NULL
     OR j.{id} OPERATOR(pg_catalog.<>) ALL(%(exclude)s::pg_catalog.text[]::{id_type}[]))
AND {mapped_filter}

-- name: mapped_filter
-- the operator's narrowing by what the job is: its kind and queue (the mapped
-- columns as text, kind_value: any of those given), and a case-insensitive substring of its
-- last error (%(error)s: an ILIKE pattern whose %% and _ jobctl escaped, triage.error_pattern)
(%(kinds)s::pg_catalog.text[] IS NULL
 OR {kind_value} OPERATOR(pg_catalog.=) ANY(%(kinds)s::pg_catalog.text[]))
AND (%(queues)s::pg_catalog.text[] IS NULL
     OR {queue_value} OPERATOR(pg_catalog.=) ANY(%(queues)s::pg_catalog.text[]))
AND (%(error)s::pg_catalog.text IS NULL
     OR {last_error_text}::pg_catalog.text OPERATOR(pg_catalog.~~*) %(error)s::pg_catalog.text)

-- name: optional_text
-- an optional column's value (kind, queue) of a type other than text, written by its type's
-- output function (as status_text: no cast an application could define is looked up)
pg_catalog.format('%%s', {column})

-- name: optional_column
-- an optional column (kind, queue) in a row's select list, named as the design names it
{value} AS {column_name},

-- name: status_text
-- the status column's value as text, written by its type's output function: no cast is
-- looked up (an application owning an ENUM can define one, CREATE CAST, that a ::text calls)
pg_catalog.format('%%s', j.{status})

-- name: earliest_time
-- the earliest lease time jobctl does arithmetic on and reads back (a client's calendar
-- starts at year 1; a day's margin for any time zone)
'0001-01-02 00:00:00+00'::pg_catalog.timestamptz

-- name: latest_time
-- the latest such lease time (a client's calendar ends with year 9999)
'9999-12-30 00:00:00+00'::pg_catalog.timestamptz

-- name: lease_expires_at_usable
-- a lease expiry jobctl can subtract and read back: none, or a finite time within a client's
-- calendar (infinity and -infinity fall outside the bounds: isfinite and more)
(j.{lease_expires_at} IS NULL
 OR (j.{lease_expires_at} OPERATOR(pg_catalog.>=) {earliest_time}
     AND j.{lease_expires_at} OPERATOR(pg_catalog.<=) {latest_time}))

-- name: heartbeat_at_usable
-- a last heartbeat jobctl can subtract and read back (as lease_expires_at_usable)
(j.{heartbeat_at} IS NULL
 OR (j.{heartbeat_at} OPERATOR(pg_catalog.>=) {earliest_time}
     AND j.{heartbeat_at} OPERATOR(pg_catalog.<=) {latest_time}))

-- name: reserved_at_usable
-- a claim time jobctl can subtract and read back (as lease_expires_at_usable)
(j.{reserved_at} IS NULL
 OR (j.{reserved_at} OPERATOR(pg_catalog.>=) {earliest_time}
     AND j.{reserved_at} OPERATOR(pg_catalog.<=) {latest_time}))

-- name: lease_times_poisoned
-- a row whose lease times jobctl can neither subtract nor read back (one bad row must not stop
-- every reclaim): stuck shows it, skipped, naming them (poisoned_lease_times); reclaim leaves
-- it for a human
NOT ({lease_expires_at_usable} AND {heartbeat_at_usable} AND {reserved_at_usable})

-- name: poisoned_lease_times
-- which lease times of a row are unusable, with their values (NULL: none)
CASE WHEN {lease_times_poisoned} THEN pg_catalog.concat_ws(', ',
    CASE WHEN NOT {lease_expires_at_usable}
         THEN pg_catalog.format('lease_expires_at %%s', j.{lease_expires_at}) END,
    CASE WHEN NOT {heartbeat_at_usable}
         THEN pg_catalog.format('heartbeat_at %%s', j.{heartbeat_at}) END,
    CASE WHEN NOT {reserved_at_usable}
         THEN pg_catalog.format('reserved_at %%s', j.{reserved_at}) END) END

-- name: lease_missing
-- a processing row with no lease in its own state (no expiry or no attempt token): claimed
-- by code that sets none, a row reclaim can never see (its fence needs both). The one place
-- the test is written: stuck, at_risk, summary, metrics, schema check and lease_state use it
(j.{lease_expires_at} IS NULL OR j.{attempt_token} IS NULL)

-- name: id_repeated
-- another row holds this row's id (a partitioned table keyed on the id and its partition
-- key: the same id in two partitions). jobctl names a job by its id alone (fences, plans,
-- the history), so such a row is left out of every read and write that selects jobs (stuck,
-- at_risk, reclaim_batch, plan_row_state, job_row, manual_read, bulk_candidates, review) and
-- named (repeated_ids); every other job is served. One probe of the id's index (the key: id
-- and partition key) per row a statement selected, never a read of the table; a row is told
-- from another by (tableoid, ctid), as a ctid is a partition's own. A table with a unique
-- index on the id alone has no repeated id: there the block is `false` (db.spelling)
EXISTS (SELECT FROM {table} o
        WHERE o.{id} OPERATOR(pg_catalog.=) j.{id}
          AND (o.tableoid OPERATOR(pg_catalog.<>) j.tableoid
               OR o.ctid OPERATOR(pg_catalog.<>) j.ctid))

-- name: repeated_ids
-- the ids a command left out (id_repeated), each with how many rows hold it and in which
-- partitions: grouped over those ids' rows alone (by the id's index), never the table's
SELECT j.{id}::pg_catalog.text AS id, pg_catalog.count(*) AS rows,
       pg_catalog.string_agg(DISTINCT j.tableoid::pg_catalog.regclass::pg_catalog.text, ', ')
           AS partitions
FROM {table} j
WHERE j.{id} = ANY(%(ids)s::pg_catalog.text[]::{id_type}[])
GROUP BY j.{id}
HAVING pg_catalog.count(*) > 1
ORDER BY j.{id}

-- name: no_lease_filter
-- the processing rows with no lease that stuck lists beside the expired ones (reclaim never
-- touches them), narrowed by the operator's filters; never part of a plan or of reclaim's
-- dry run (%(no_lease)s false)
(%(no_lease)s::pg_catalog.bool
 AND j.{status} OPERATOR(pg_catalog.=) {processing} AND {lease_missing} AND {operator_filter}
 AND %(plan)s::pg_catalog.jsonb IS NULL)

-- name: claimed_age_s
-- how long ago a row was claimed (reserved_at), in seconds, where jobctl can subtract it
CASE WHEN {reserved_at_usable}
     THEN pg_catalog.date_part('epoch',
                               pg_catalog.now() OPERATOR(pg_catalog.-) {j_reserved_at_time})
END

-- name: lease_state
-- a job's lease as an operator sees it: live, expired, or none (not processing, or
-- processing with no lease: lease_missing). The one place it is judged: show, explain,
-- manual writes, and every count of leases (summary, metrics, report, top) read it
CASE WHEN j.{status} OPERATOR(pg_catalog.<>) {processing} OR {lease_missing}
     THEN 'none'::pg_catalog.text
     WHEN j.{lease_expires_at} OPERATOR(pg_catalog.<) pg_catalog.now()
     THEN 'expired'::pg_catalog.text
     ELSE 'live'::pg_catalog.text END

-- name: lease_less_recent
-- a processing job with no lease (lease_missing) whose claim is recent: claimed within
-- lease_less_window, or at a time jobctl cannot read (no reserved_at, or one out of range).
-- With no lease jobctl cannot tell a running worker from a dead one but by the claim's age:
-- such a job is taken like a live lease (the manual writes refuse it without --force). The
-- one place it is judged: the manual writes (by id, by filter, by plan), show and explain
(j.{status} OPERATOR(pg_catalog.=) {processing} AND {lease_missing}
 AND (j.{reserved_at} IS NULL OR NOT {reserved_at_usable}
      OR {j_reserved_at_time} OPERATOR(pg_catalog.>)
         (pg_catalog.now() OPERATOR(pg_catalog.-) {lease_less_window})))

-- name: lease_less_window
-- how long after its claim a job with no lease may still be running (lease_less_recent):
-- 1 hour (docs/commands.md says why)
'1 hour'::pg_catalog.interval

-- name: lease_expiring_soon
-- a live lease (lease_state) that runs out within lease_soon_window. The one place "expiring
-- soon" is judged: summary, top, metrics, stuck --expiring, show and explain read it
({lease_state} OPERATOR(pg_catalog.=) 'live'::pg_catalog.text
 AND j.{lease_expires_at} OPERATOR(pg_catalog.<)
     (pg_catalog.now() OPERATOR(pg_catalog.+) {lease_soon_window}))

-- name: lease_soon_window
-- how long before its expiry a live lease is expiring soon: %(soon)s when the operator gives
-- a window (--expiring-within); else the last third of the lease the row was last given, from
-- its start (lease_start) to lease_expires_at. A worker that heartbeats at least every
-- half lease never lets its lease into the last third, so one there has missed its beats,
-- whatever the lease's length (a 6 s lease just extended is live; a 30 s window called every
-- lease under 30 s expiring). A row whose times give no length (none, or out of range, or an
-- expiry not after its start) falls back to 30 s, the window before
CASE WHEN %(soon)s::pg_catalog.interval IS NOT NULL THEN %(soon)s::pg_catalog.interval
     WHEN {lease_expires_at_usable} AND {heartbeat_at_usable} AND {reserved_at_usable}
          AND {lease_start} OPERATOR(pg_catalog.<) j.{lease_expires_at}
     THEN (j.{lease_expires_at} OPERATOR(pg_catalog.-) {lease_start})
          OPERATOR(pg_catalog./) 3::pg_catalog.float8
     ELSE '30 seconds'::pg_catalog.interval END

-- name: lease_start
-- when the lease the row holds was last given: the later of heartbeat_at and reserved_at (a
-- claim sets the claim time, a heartbeat the beat and the new expiry; a claim by a writer that
-- leaves an earlier attempt's heartbeat_at in place must not start its lease there), as a
-- timestamptz (a time of type timestamp, Rails', read in the session's zone, as jobctl compares
-- these times everywhere). The one place a lease's start is judged: expiring soon
-- (lease_soon_window) and explain's lease length (lease_length_s)
GREATEST(j.{heartbeat_at}, {j_reserved_at_time})

-- name: expired_filter
-- expired leases, narrowed by the operator's filters and an optional plan (a row of the plan
-- matched column by column: a row IN (...) looks its operators up by name). A row with no
-- attempt token is not one (lease_missing: reclaim's fence needs the token; stuck lists it
-- apart), so the dry run shows what the commit does. The token's test is num_nulls(...) <> 1,
-- not IS NOT NULL: the planner would multiply the lease's selectivity by the share of tokens
-- not null in the whole table (done rows have none), though both go together, and, expecting
-- fewer rows than a batch, sort every expired row in each batch instead of reading the reclaim
-- index in order (3x the reclaim's time at 20k expired in 1M rows;
-- docs/reference/performance.md)
j.{status} OPERATOR(pg_catalog.=) {processing}
AND pg_catalog.num_nulls(j.{attempt_token}) OPERATOR(pg_catalog.<>) 1
AND j.{lease_expires_at}
    OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) %(grace)s::pg_catalog.interval)
AND {operator_filter}
AND (%(plan)s::pg_catalog.jsonb IS NULL
     OR EXISTS (
         SELECT FROM pg_catalog.jsonb_to_recordset(%(plan)s::pg_catalog.jsonb)
              AS p(id {id_type}, attempt_token pg_catalog.uuid,
                   lease_expires_at pg_catalog.timestamptz, action pg_catalog.text)
         WHERE p.id OPERATOR(pg_catalog.=) j.{id}
           AND p.attempt_token OPERATOR(pg_catalog.=) j.{attempt_token}
           AND p.lease_expires_at OPERATOR(pg_catalog.=) j.{lease_expires_at}
           AND p.action OPERATOR(pg_catalog.=) {reclaim_action}))

-- name: expired_after
-- the expired leases (expired_filter) that ran out at or after %(since)s: after a confirmed
-- commit, those that expired while its question was up (the preview, read at %(since)s, saw
-- none of them), which it left (reclaim index: a range of lease_expires_at)
SELECT count(*) AS expired FROM {table} j
WHERE {expired_filter} AND j.{lease_expires_at} >= %(since)s::timestamptz

-- name: session_description
-- a session (pg_stat_activity a) as jobctl names one that holds it up
format('pid %%s (%%s, transaction open %%ss: %%s)', a.pid, a.state,
       round(extract(epoch FROM clock_timestamp()
                    - coalesce(a.xact_start, a.query_start, a.backend_start))::numeric, 1),
       left(regexp_replace(a.query, '\s+', ' ', 'g'), 60))

-- name: row_lock_holders
-- the transactions that hold row locks now, each with its sessions named, as one row: a map
-- from transaction id to its holders (NULL: none). One snapshot of pg_locks and
-- pg_stat_activity per statement, looked up by a row's xmax (readable in a read-only
-- transaction) at a constant cost a row, however many rows or locks. As a subquery per row it
-- cost about 24 a row in the planner's units, and 20,000 processing rows took stuck's plan past
-- jit_inline_above_cost: half a second of compiling on every call
-- (docs/reference/performance.md)
SELECT jsonb_object_agg(h.xid, h.locked_by) AS holders
FROM (SELECT l.transactionid::text AS xid, string_agg({session_description}, '; ') AS locked_by
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
        AND l.pid <> pg_backend_pid()
      GROUP BY l.transactionid) h

-- name: lockers_join
-- row_lock_holders as a statement's CTE "lockers" joined to its rows (always one row)
LEFT JOIN lockers lk ON true

-- name: row_locked_by
-- who holds a row lock on a row, from lockers_join: looked up only for a row with an xmax
-- (0: no transaction ever locked, updated or deleted this version of it)
CASE WHEN j.xmax <> '0'::xid THEN lk.holders ->> j.xmax::text END

-- name: row_lockers
-- who holds a row lock on one row, from its xmax: for statements that read a few rows by id
-- (a plan's, an operator's); stuck and at_risk join row_lock_holders once instead
(SELECT k.holders ->> j.xmax::text FROM ({row_lock_holders}) k)

-- name: stuck
-- expired leases, oldest expiry first, each with what reclaim would do (read only); a row
-- with lease times jobctl cannot use names them (reclaim leaves it: skipped); then the
-- processing rows with no lease (lease_state none, longest claimed first), which reclaim
-- never touches (lease_state judges each: expired, or none)
WITH lockers AS MATERIALIZED ({row_lock_holders})
SELECT {lease_columns}, {row_locked_by} AS locked_by, {poisoned_lease_times} AS poisoned,
       {lease_state} AS lease_state,
       {claimed_age_s} AS claimed_age_s, {id_repeated} AS id_repeated
FROM {table} j {lockers_join}
WHERE {expired_filter} OR {no_lease_filter}
ORDER BY {lease_missing}, j.{lease_expires_at}, j.{reserved_at}, j.{id}
LIMIT %(limit)s

-- name: stuck_count
-- every row stuck would list without its --limit, expired and with no lease apart: what its
-- footers count when the limit cut the list (the same filter; read through the reclaim
-- index's processing rows, read only)
SELECT count(*) FILTER (WHERE NOT {lease_missing}) AS expired,
       count(*) FILTER (WHERE {lease_missing}) AS no_lease
FROM {table} j
WHERE {expired_filter} OR {no_lease_filter}

-- name: at_risk
-- expired leases and live ones expiring soon (lease_expiring_soon: within %(soon)s, or in the
-- last third of their lease), with each worker's lag
WITH lockers AS MATERIALIZED ({row_lock_holders}), lag AS (
    SELECT {reserved_by} AS worker,
           extract(epoch FROM now() - max(coalesce(j.{heartbeat_at}, {j_reserved_at_time})))
               ::float8 AS lag_s
    FROM {table} j WHERE {status} = {processing} AND NOT ({lease_times_poisoned})
    GROUP BY {reserved_by}
)
SELECT {lease_columns},
       -- grace: on a standby, its replay lag (a lease that expired within it may be live)
       CASE WHEN {lease_missing} THEN 'none'
            WHEN {lease_expiring_soon} THEN 'expiring'
            WHEN j.{lease_expires_at} < now() - %(grace)s::interval THEN 'expired'
            ELSE 'expiring' END AS lease_state,
       lag.lag_s AS worker_heartbeat_lag_s, {row_locked_by} AS locked_by,
       {poisoned_lease_times} AS poisoned, {claimed_age_s} AS claimed_age_s,
       {id_repeated} AS id_repeated
FROM {table} j LEFT JOIN lag ON lag.worker IS NOT DISTINCT FROM j.{reserved_by} {lockers_join}
WHERE j.{status} = {processing}
  AND ({lease_missing} OR j.{lease_expires_at} < now() OR {lease_expiring_soon})
  AND {operator_filter}
ORDER BY {lease_missing}, j.{lease_expires_at}, j.{reserved_at}, j.{id}
LIMIT %(limit)s

-- name: reclaim_batch
-- the lease design's reclaim: one batch of expired rows, locked, fenced, applied. The fence
-- is the row exactly as the CTE read and locked it (id, attempt token, lease expiry, status:
-- so still processing and still expired), written as join conditions so that the planner
-- reaches each row by its id; a constant status test here made it hash-join every expired
-- row of the table instead, in every batch (docs/reference/performance.md). A row whose lease
-- times jobctl cannot use is left for a human (stuck and the dry run show it skipped, naming them).
-- Every row it locked is returned, what it read next to what the UPDATE wrote
-- (reclaim_written): an application's BEFORE trigger that fires after jobctl's may change the
-- row back, or keep it back (RETURN NULL: not written, its written columns NULL). Such a row
-- fails the statement (reclaim_refusal, history 013): the transaction rolls back, the events
-- jobctl's trigger inserted with it, and reclaim tries the batch again row by row
WITH expired AS (
    SELECT {lease_columns}
    FROM {table} j
    WHERE {expired_filter} AND NOT ({lease_times_poisoned}) AND NOT {id_repeated}
    ORDER BY j.{lease_expires_at}, j.{id}
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
){paced}, written AS (
UPDATE {table} AS j
SET {status} = CASE WHEN expired.action OPERATOR(pg_catalog.=) 'requeue'::pg_catalog.text
                    THEN {queued} ELSE {parked} END,
    {available_at} = CASE WHEN expired.action OPERATOR(pg_catalog.=) 'requeue'::pg_catalog.text
                          THEN {returns_at} ELSE j.{available_at} END,
    {reserved_by} = NULL,
    {reserved_at} = NULL,
    {heartbeat_at} = NULL,
    {lease_expires_at} = NULL,
    {attempt_token} = NULL,
    {reclaim_count} = j.{reclaim_count} OPERATOR(pg_catalog.+) 1,
    {last_error} = {reclaim_error_value},
    {finished_at} = CASE WHEN expired.action OPERATOR(pg_catalog.=) 'requeue'::pg_catalog.text
                         THEN NULL ELSE {finished_at_now} END,
    {updated_at} = {updated_at_now},
    jobctl_action = 'reclaimed'{refund_set}
FROM expired {paced_join}
WHERE j.{id} OPERATOR(pg_catalog.=) expired.id
  AND j.{attempt_token} OPERATOR(pg_catalog.=) expired.attempt_token
  AND j.{lease_expires_at} OPERATOR(pg_catalog.=) expired.lease_expires_at
  AND {status_text} OPERATOR(pg_catalog.=) expired.status
RETURNING j.{id} AS id, {status_text} AS status, j.{attempt_token} IS NULL AS token_cleared,
          j.{reclaim_count} AS reclaim_count
)
SELECT {reclaim_returned}, {reclaim_written}
FROM expired LEFT JOIN written ON written.id OPERATOR(pg_catalog.=) expired.id
WHERE {reclaim_refused}
ORDER BY expired.lease_expires_at, expired.id

-- name: reclaim_written
-- what reclaim_batch wrote of each row it locked, as the row stands after every BEFORE trigger
-- (the new row's columns): its status (as status_text writes it), whether its attempt token is
-- cleared, its reclaim_count, and the reclaim_count it read; all NULL for a row an application's
-- trigger kept back (not written). batches compares them with what it meant to write (the
-- status decided, the token cleared, reclaim_count + 1): a row changed back is skipped
written.id IS NOT NULL AS written_row, written.status AS written_status,
written.token_cleared AS written_token_cleared, written.reclaim_count AS written_reclaim_count,
expired.reclaim_count AS read_reclaim_count

-- name: reclaim_as_meant
-- was a row reclaim_batch locked written as meant (tally.as_written's judgement, in the
-- statement): written at all, with the status its action decided (as status_text writes it),
-- its attempt token cleared and its reclaim_count one more than it read (a count read NULL is
-- not judged)
coalesce(
    written.id IS NOT NULL
    AND written.status OPERATOR(pg_catalog.=)
        pg_catalog.format('%%s', CASE WHEN expired.action OPERATOR(pg_catalog.=)
                                           'requeue'::pg_catalog.text
                                      THEN {queued} ELSE {parked} END)
    AND written.token_cleared
    AND (expired.reclaim_count IS NULL
         OR written.reclaim_count OPERATOR(pg_catalog.=)
            (expired.reclaim_count OPERATOR(pg_catalog.+) 1)),
    false)

-- name: reclaim_refusal
-- reclaim_batch's {reclaim_refused} (db.spelling, from history 013 on; true before it: the
-- batch commits, its rows reported as written): true for a row written as meant
-- (reclaim_as_meant); for any other the statement fails (jobctl.refuse: SQLSTATE JC001, what
-- was written of the row, reclaim_written, as JSON in its DETAIL), so that the batch's
-- transaction rolls back and nothing of a transition that did not happen is recorded.
-- jobctl.refuse is called only for such a row
CASE WHEN {reclaim_as_meant} THEN true
     ELSE jobctl.refuse('jobctl: a row an application trigger kept back or changed'
                            ::pg_catalog.text,
                        (SELECT pg_catalog.row_to_json(w)::pg_catalog.text
                         FROM (SELECT {reclaim_written}) AS w))
END

-- name: reclaim_counted
-- what reclaim_batch returns of each row once the output shows no more rows whole (a table
-- shows the first ones and counts the rest): the id and the action, not the lease's columns
expired.id, expired.action

-- name: reclaim_paced
-- reclaim --spread, reclaim_batch's {paced} (with {returns_at} paced.available_at
-- and {paced_join} reclaim_paced_join): the k-th of n rows returns at
-- now() + spread * (k - 1 + jitter) / n. Only with --spread: joined back to the batch it costs
-- a pass over the batch for each row (a nested loop of CTE scans: twice the batch's time at
-- 500 rows), so a reclaim without it returns the rows at now() and has no join
, paced AS (
    SELECT expired.id,
           pg_catalog.now() OPERATOR(pg_catalog.+)
               (%(spread)s::pg_catalog.interval OPERATOR(pg_catalog.*)
                ((((pg_catalog.row_number() OVER (ORDER BY expired.lease_expires_at,
                                                           expired.id)
                    OPERATOR(pg_catalog.-) 1)::pg_catalog.float8)
                  OPERATOR(pg_catalog.+) pg_catalog.random())
                 OPERATOR(pg_catalog./) (pg_catalog.count(*) OVER ())::pg_catalog.float8))
               AS available_at
    FROM expired
)

-- name: reclaim_paced_join
-- reclaim --spread: each row of the batch with its return time (reclaim_paced)
 JOIN paced ON paced.id OPERATOR(pg_catalog.=) expired.id

-- name: refund_attempt
-- reclaim --refund-attempt, reclaim_batch's {refund_set}: a requeued job's killed
-- attempt given back (a deploy's kill is not the job's failure), never below 0; empty without
-- it, so that an operator role granted no UPDATE of attempts reclaims as before
, {attempts} = CASE WHEN expired.action OPERATOR(pg_catalog.=) 'requeue'::pg_catalog.text
                     AND j.{attempts} OPERATOR(pg_catalog.>) 0
                    THEN j.{attempts} OPERATOR(pg_catalog.-) 1
                    ELSE j.{attempts} END

-- name: plan_row_state
-- what became of planned rows that a plan's commit did not apply
SELECT j.{id} AS id, {status_text} AS status, j.{attempt_token} AS attempt_token,
       CASE WHEN {lease_expires_at_usable} THEN j.{lease_expires_at} END AS lease_expires_at,
       j.{lease_expires_at} < now() AS lease_expired,
       {reclaim_action} AS action, {row_lockers} AS locked_by,
       {poisoned_lease_times} AS poisoned, {id_repeated} AS id_repeated
FROM {table} j
WHERE j.{id} = ANY(%(ids)s::text[]::{id_type}[])

-- name: metrics_leases
-- the queue's lease health, one pass over processing rows (reclaim index): each row's lease
-- as lease_state judges it, the stuck ones by their effective policy (effective_policy)
SELECT count(*) FILTER (WHERE {lease_state} = 'expired' AND {effective_policy} = 'auto')
           AS stuck_auto,
       count(*) FILTER (WHERE {lease_state} = 'expired' AND {effective_policy} = 'manual')
           AS stuck_manual,
       coalesce(extract(epoch FROM now() - min({lease_expires_at})
                        FILTER (WHERE {lease_state} = 'expired'
                                  AND {lease_expires_at_usable})), 0)::float8
           AS oldest_expired_s,
       count(*) FILTER (WHERE {lease_state} = 'live') AS live,
       count(*) FILTER (WHERE {lease_expiring_soon}) AS expiring_soon,
       count(*) FILTER (WHERE {lease_state} = 'none') AS no_lease,
       coalesce(max({claimed_age_s}) FILTER (WHERE {lease_state} = 'none'), 0)::float8
           AS oldest_no_lease_claimed_s
FROM {table} j WHERE {status} = {processing} AND {mapped_filter}

-- name: metrics_reclaims
-- reclaims the history recorded in the last window, and every one it holds for the table
-- (jobctl_reclaims_total, a counter: one pass over the table's reclaimed events)
SELECT count(*) FILTER (WHERE at > now() - %(window)s::interval) AS reclaims,
       count(*) AS reclaims_total
FROM jobctl.events
WHERE job_table = %(job_table)s AND event = 'reclaimed'

-- name: summary_status
-- jobs per status, counted (a full scan: for small tables or --exact)
SELECT pg_catalog.format('%%s', {status}) AS status, count(*) AS jobs FROM {table} j
WHERE {mapped_filter}
GROUP BY 1 ORDER BY 1

-- name: summary_status_live
-- queued and processing jobs, counted (index-driven with a queue index)
SELECT pg_catalog.format('%%s', {queued}) AS status, count(*) AS jobs FROM {table} j
WHERE {status} = {queued} AND {mapped_filter}
UNION ALL
SELECT pg_catalog.format('%%s', {processing}), count(*) FROM {table} j
WHERE {status} = {processing} AND {mapped_filter}

-- name: summary_status_estimate
-- jobs per status estimated from the planner's statistics
SELECT v.status, round(v.freq * greatest(c.reltuples, 0))::bigint AS jobs
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname
                AND s.attname = %(status_column)s
CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs)
     AS v(status, freq)
WHERE c.oid = %(oid)s

-- name: table_size_estimate
-- rows in the table, as the planner believes
SELECT greatest(reltuples, 0)::bigint AS estimate FROM pg_class WHERE oid = %(oid)s

-- name: summary_processing
-- processing rows split by lease state (lease_state; reclaim index): live beyond the window,
-- expiring within it, expired, none
SELECT count(*) FILTER (WHERE {lease_state} = 'live' AND NOT {lease_expiring_soon}) AS live,
       count(*) FILTER (WHERE {lease_expiring_soon}) AS expiring_soon,
       count(*) FILTER (WHERE {lease_state} = 'expired') AS expired,
       count(*) FILTER (WHERE {lease_state} = 'none') AS no_lease
FROM {table} j WHERE {status} = {processing} AND {mapped_filter}

-- name: summary_workers
-- processing jobs per worker: lease states (lease_state), the expiry burst, heartbeat lag;
-- grouped by the whole name, shown cut ({shown_reserved_by}: display_text)
SELECT {shown_reserved_by} AS worker, count(*) AS processing,
       count(*) FILTER (WHERE {lease_state} = 'expired') AS expired,
       count(*) FILTER (WHERE {lease_state} = 'expired' AND {effective_policy} = 'manual')
           AS expired_manual,
       count(*) FILTER (WHERE {lease_expiring_soon}) AS expiring_soon,
       min({lease_expires_at}) FILTER (WHERE {lease_state} = 'expired'
                                         AND {lease_expires_at_usable}) AS first_expiry,
       max({lease_expires_at}) FILTER (WHERE {lease_state} = 'expired'
                                         AND {lease_expires_at_usable}) AS last_expiry,
       max(coalesce(j.{heartbeat_at}, {j_reserved_at_time}))
           FILTER (WHERE {heartbeat_at_usable} AND {reserved_at_usable}) AS last_seen_at,
       extract(epoch FROM now() - max(coalesce(j.{heartbeat_at}, {j_reserved_at_time}))
                                  FILTER (WHERE {heartbeat_at_usable} AND {reserved_at_usable}))
           ::float8 AS heartbeat_lag_s
FROM {table} j
WHERE {status} = {processing} AND {mapped_filter}
GROUP BY {reserved_by}
ORDER BY count(*) FILTER (WHERE {lease_state} = 'expired') DESC,
         min({lease_expires_at}), {reserved_by}

-- name: summary_groups
-- summary --by: per group ({group_key}: the kind, the queue, the worker or the
-- error's kind, error_group) the processing rows by lease state (lease_state), the stuck ones (expired),
-- those awaiting review, the ready ones and the oldest wait; the most stuck first. Three
-- branches, each read through its own index (processing: the reclaim index; ready: the queue's;
-- awaiting review: the history's candidates, review_candidates), then summed per group: one
-- WHERE joining the three with OR left the planner nothing but a scan of the whole table.
-- Grouped by the whole value, shown cut past %(cut)s characters ({shown_group}: display_text
-- of g.grp)
SELECT {shown_group} AS grp, sum(g.processing)::pg_catalog.int8 AS processing,
       sum(g.live)::pg_catalog.int8 AS live,
       sum(g.expiring_soon)::pg_catalog.int8 AS expiring_soon,
       sum(g.stuck)::pg_catalog.int8 AS stuck,
       sum(g.stuck_manual)::pg_catalog.int8 AS stuck_manual,
       sum(g.no_lease)::pg_catalog.int8 AS no_lease,
       sum(g.awaiting_review)::pg_catalog.int8 AS awaiting_review,
       sum(g.ready)::pg_catalog.int8 AS ready,
       max(g.oldest_ready_s) AS oldest_ready_s
FROM (
    SELECT {group_key} AS grp, count(*) AS processing,
           count(*) FILTER (WHERE {lease_state} = 'live' AND NOT {lease_expiring_soon}) AS live,
           count(*) FILTER (WHERE {lease_expiring_soon}) AS expiring_soon,
           count(*) FILTER (WHERE {lease_state} = 'expired') AS stuck,
           count(*) FILTER (WHERE {lease_state} = 'expired' AND {effective_policy} = 'manual')
               AS stuck_manual,
           count(*) FILTER (WHERE {lease_state} = 'none') AS no_lease,
           0 AS awaiting_review, 0 AS ready, NULL::pg_catalog.float8 AS oldest_ready_s
    FROM {table} j
    WHERE j.{status} = {processing} AND {mapped_filter}
    GROUP BY 1
    UNION ALL
    SELECT {group_key}, 0, 0, 0, 0, 0, 0, 0, count(*),
           {oldest_ready_s}
    FROM {table} j
    WHERE {ready_now} AND {mapped_filter}
    GROUP BY 1
    UNION ALL
    SELECT {group_key}, 0, 0, 0, 0, 0, 0, count(*), 0, NULL
    FROM {table} j
    WHERE {awaiting_candidates} AND {awaiting_review} AND {mapped_filter}
    GROUP BY 1
) g
GROUP BY g.grp
ORDER BY 5 DESC, 2 DESC, 1
LIMIT %(limit)s

-- name: error_group
-- the kind of a job's last error, for summary --by error: its first line, cut to 200
-- characters, with uuids and long hex ids as <id> and every number as N (so that "timeout
-- after 30s on job 812" and "timeout after 31s on job 977" are one group)
pg_catalog.left(pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
    pg_catalog.split_part({last_error_text}::pg_catalog.text, E'\n', 1),
    '[0-9a-fA-F]+-[0-9a-fA-F]+-[0-9a-fA-F]+-[0-9a-fA-F]+-[0-9a-fA-F]+',
    '<id>', 'g'),
    '\m(0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*\M', 'N', 'g'),
    '[0-9]+', 'N', 'g'), 200)

-- name: lease_length_s
-- a lease's length in seconds: its expiry less its start (lease_start: the later of the last
-- heartbeat and the claim), explain's "lease 15s", computed here so that a claim time of type
-- timestamp is subtracted from a timestamptz expiry; NULL when a time is missing or one jobctl
-- cannot subtract (lease_times_poisoned)
CASE WHEN NOT ({lease_times_poisoned})
     THEN pg_catalog.date_part('epoch', j.{lease_expires_at} OPERATOR(pg_catalog.-) {lease_start})
END

-- name: job_row
-- one job, every column (the table's names: jobctl.triage renames the design's), with its
-- lease state
SELECT j.*, {lease_state} AS lease_state, {lease_expiring_soon} AS lease_expiring_soon,
       {lease_less_recent} AS lease_less_recent,
       {effective_policy} AS effective_policy, {policy_source} AS policy_from, ({awaiting_review}) AS awaiting_review,
       CASE WHEN {awaiting_review} THEN {review_why} END AS review_why,
       j.xmin::text AS row_version, {id_repeated} AS jobctl_id_repeated,
       {lease_length_s} AS jobctl_lease_s
FROM {table} j WHERE j.{id} = %(id)s::text::{id_type}

-- name: job_row_shown
-- one job as a display shows it (show, history, explain): job_row with each long value cut on
-- the server ({shown_columns}: the table's columns in order, each long one as shown_column),
-- so that a 100 MB last_error never crosses the wire
SELECT {shown_columns}, {lease_state} AS lease_state,
       {lease_expiring_soon} AS lease_expiring_soon, {lease_less_recent} AS lease_less_recent,
       {effective_policy} AS effective_policy,
       {policy_source} AS policy_from, ({awaiting_review}) AS awaiting_review,
       CASE WHEN {awaiting_review} THEN {review_why} END AS review_why,
       j.xmin::text AS row_version, {id_repeated} AS jobctl_id_repeated,
       {lease_length_s} AS jobctl_lease_s
FROM {table} j WHERE j.{id} = %(id)s::text::{id_type}

-- name: shown_column
-- a column of variable length (text, jsonb, bytea ...) of a job as a display shows it: the
-- value as it is ({column}, named {column_name}; {text} is it as text) unless it is long
-- (text_is_long); then NULL, and beside it (as {cut_name}) its cut with a note (text_cut)
CASE WHEN {text_is_long} THEN NULL ELSE {column} END AS {column_name},
CASE WHEN {text_is_long} THEN {text_cut} END AS {cut_name}

-- name: text_is_long
-- whether the text {text} is longer than %(cut)s characters (never when %(cut)s is NULL:
-- --full); its length in bytes first (read without the value), then the characters of a slice
-- of it (substr reads only the first ones of a long value)
(%(cut)s::pg_catalog.int4 IS NOT NULL
 AND pg_catalog.octet_length({text}) OPERATOR(pg_catalog.>) %(cut)s::pg_catalog.int4
 AND pg_catalog.length(pg_catalog.substr(
         {text}, 1, %(cut)s::pg_catalog.int4 OPERATOR(pg_catalog.+) 1::pg_catalog.int4))
     OPERATOR(pg_catalog.>) %(cut)s::pg_catalog.int4)

-- name: text_cut
-- a long text {text} as a display shows it (a 100 MB last_error): its first %(cut)s
-- characters and a note of how many bytes more there are
pg_catalog.format(
    '%%s… (%%s more bytes; --full shows all)',
    pg_catalog.substr({text}, 1, %(cut)s::pg_catalog.int4),
    pg_catalog.octet_length({text}) OPERATOR(pg_catalog.-)
        pg_catalog.octet_length(pg_catalog.substr({text}, 1, %(cut)s::pg_catalog.int4)))

-- name: display_text
-- the text {text} as a display shows it: whole, or cut with a note when it is long (the
-- statements that show the history's texts get it as {shown_worker} ..., triage.shown_texts)
CASE WHEN {text_is_long} THEN {text_cut} ELSE {text} END

-- name: kept_text
-- a text the history keeps ({text}) as a display shows it: display_text, unless the history
-- kept it cut (history 011: {bytes}, the whole text's length in bytes, is set; NULL before
-- 011, or whole); then what it kept and a note of the bytes it did not keep, with or without
-- --full (the history has no more of it), so that a kept text still reads longer than the
-- cut and is never taken for a whole one (triage.shown_texts)
CASE WHEN {bytes} IS NOT NULL AND NOT {text_is_long}
     THEN pg_catalog.format('%%s… (%%s more bytes not kept by the history)', {text},
                            {bytes} OPERATOR(pg_catalog.-) pg_catalog.octet_length({text}))
     ELSE {display_text} END

-- name: job_events
-- a job's events from the history, oldest first (the latest %(limit)s); claimed: what a role
-- not jobctl's declared (history 005; read through to_jsonb, NULL before 005 is applied);
-- the texts a row or a role wrote (worker, actor, reason) cut for display ({shown_worker} ...:
-- display_text)
SELECT * FROM (
    SELECT e.at, e.event, e.from_status, e.to_status, e.attempt, e.attempt_token,
           {shown_worker} AS worker, {shown_actor} AS actor, {shown_reason} AS reason, e.db_role,
           pg_catalog.to_jsonb(e) -> 'claimed' AS claimed, e.event_id
    FROM jobctl.events e
    WHERE e.job_table = %(job_table)s AND e.job_id = %(id)s
    ORDER BY e.event_id DESC LIMIT %(limit)s
) latest ORDER BY event_id

-- name: job_attempts
-- a job's attempts (the heartbeat history), oldest first: one row per ended
-- attempt (the live one is read from the jobs row; see jobctl/history.py); the worker's name
-- cut for display ({shown_worker}: display_text)
SELECT a.attempt, a.attempt_token, {shown_worker} AS worker, a.claimed_at, a.heartbeats,
       a.last_heartbeat_at, extract(epoch FROM a.max_heartbeat_gap)::float8 AS max_heartbeat_gap_s,
       a.ended_at, a.outcome, extract(epoch FROM a.lease)::float8 AS lease_s,
       a.lease_expires_at, a.heartbeat_stats, a.ended_by
FROM jobctl.attempts a
WHERE a.job_table = %(job_table)s AND a.job_id = %(id)s
ORDER BY a.claimed_at, a.attempt

-- name: manual_read
-- a job as an operator action sees it (its fence: status, token, version)
SELECT {fence_columns}, j.{lease_expires_at} AS lease_expires_at,
       {lease_state} AS lease_state, ({awaiting_review}) AS awaiting_review,
       {lease_less_recent} AS lease_less_recent, {claimed_age_s} AS claimed_age_s,
       {id_repeated} AS id_repeated
FROM {table} j WHERE j.{id} = %(id)s::text::{id_type}

-- name: fence_columns
-- a job as an operator write reads it: what it decides on, and its fence (the texts the
-- application writes cut past %(cut)s characters, as stuck's rows show them: the fence is
-- the id, status, token and version, never a text)
j.{id} AS id, {status_text} AS status, {shown_reserved_by} AS reserved_by,
j.{attempt_token} AS attempt_token, j.{attempts} AS attempts, j.{max_attempts} AS max_attempts,
j.{reclaim_count} AS reclaim_count, {shown_recovery_policy} AS recovery_policy,
{effective_policy} AS effective_policy,
{shown_last_error} AS last_error, {j_updated_at_seen} AS updated_at,
j.xmin::text AS row_version

-- name: seen_rows
-- the rows as an operator read them (JSON), for the fence
pg_catalog.jsonb_to_recordset(%(seen)s::pg_catalog.jsonb)
    AS seen(id {id_type}, status pg_catalog.text, attempt_token pg_catalog.uuid,
            updated_at {updated_at_seen_type}, row_version pg_catalog.text)

-- name: manual_fence
-- the condition every operator write carries: the row exactly as read (null as read, or
-- equal: IS NOT DISTINCT FROM would look its operator up by name)
j.{id} OPERATOR(pg_catalog.=) seen.id
AND {status_text} OPERATOR(pg_catalog.=) seen.status
AND (j.{attempt_token} OPERATOR(pg_catalog.=) seen.attempt_token
     OR (j.{attempt_token} IS NULL AND seen.attempt_token IS NULL))
AND ({j_updated_at_seen} OPERATOR(pg_catalog.=) seen.updated_at
     OR (j.{updated_at} IS NULL AND seen.updated_at IS NULL))
AND j.xmin::pg_catalog.text OPERATOR(pg_catalog.=) seen.row_version

-- name: manual_requeue
-- give a job back to the queue by hand, fenced
UPDATE {table} AS j
SET {status} = {queued},
    {available_at} = {available_at_now} OPERATOR(pg_catalog.+) %(delay)s::pg_catalog.interval,
    {reserved_by} = NULL, {reserved_at} = NULL, {heartbeat_at} = NULL,
    {lease_expires_at} = NULL, {attempt_token} = NULL, {finished_at} = NULL,
    {updated_at} = {updated_at_now}, jobctl_action = 'requeued'
FROM {seen_rows}
WHERE {manual_fence}
RETURNING j.{id} AS id, {status_text} AS status

-- name: manual_fail
-- fail a job by hand, fenced
UPDATE {table} AS j
SET {status} = {failed},
    {finished_at} = {finished_at_now},
    {last_error} = {reason_value},
    {reserved_by} = NULL, {reserved_at} = NULL, {heartbeat_at} = NULL,
    {lease_expires_at} = NULL, {attempt_token} = NULL,
    {updated_at} = {updated_at_now}, jobctl_action = 'manually_failed'
FROM {seen_rows}
WHERE {manual_fence}
RETURNING j.{id} AS id, {status_text} AS status

-- name: manual_cancel
-- take a running attempt back by hand (jobctl cancel, and jobctl fail --force on a live
-- lease: the same write), fenced on the attempt as read: the job failed, or (%(park)s) put
-- in the park status, or (%(cancelled)s: jobctl cancel) given {cancelled}, the table's own
-- cancelled status where mapped (failed where not), with the operator's reason as
-- last_error; its lease and token cleared, so that the worker's next heartbeat, completion
-- or fail, fenced on its token, matches no row
UPDATE {table} AS j
SET {status} = CASE WHEN %(park)s::pg_catalog.bool THEN {parked}
                    WHEN %(cancelled)s::pg_catalog.bool THEN {cancelled} ELSE {failed} END,
    {finished_at} = {finished_at_now},
    {last_error} = {reason_value},
    {reserved_by} = NULL, {reserved_at} = NULL, {heartbeat_at} = NULL,
    {lease_expires_at} = NULL, {attempt_token} = NULL,
    {updated_at} = {updated_at_now}, jobctl_action = 'cancelled'
FROM {seen_rows}
WHERE {manual_fence}
RETURNING j.{id} AS id, {status_text} AS status

-- name: manual_fence_holds
-- after an operator write changed no row: is the row still exactly as read? Then the write
-- matched it and something of the application's (a BEFORE trigger's NULL, a rule) kept it back
SELECT EXISTS (SELECT FROM {table} AS j, {seen_rows} WHERE {manual_fence}) AS holds

-- name: set_policy
-- switch jobs' recovery policy, each fenced on the row as read
UPDATE {table} AS j
SET {recovery_policy} = %(policy)s::pg_catalog.text, {updated_at} = {updated_at_now}, jobctl_action = %(event)s
FROM {seen_rows}
WHERE {manual_fence}
RETURNING j.{id} AS id

-- name: bulk_candidates
-- requeue/fail on a filter: the jobs it matches, read as manual_read reads one
-- (its fence: status, token, version), with their kind and queue; by status (the table's
-- values), the worker holding it, how long since it last changed, what the job is, and
-- (--no-lease) whether it is a claim with no lease (lease_missing)
SELECT {fence_columns}, {mapped_columns} j.{lease_expires_at} AS lease_expires_at,
       {lease_state} AS lease_state, ({awaiting_review}) AS awaiting_review,
       {lease_less_recent} AS lease_less_recent, {claimed_age_s} AS claimed_age_s,
       {id_repeated} AS id_repeated
FROM {table} j
WHERE j.{status} OPERATOR(pg_catalog.=) ANY(%(statuses)s::pg_catalog.text[]::{status_type}[])
  AND (%(worker)s::pg_catalog.text IS NULL
       OR j.{reserved_by}::pg_catalog.text OPERATOR(pg_catalog.=) %(worker)s::pg_catalog.text)
  AND (%(older_than)s::pg_catalog.interval IS NULL
       OR {j_updated_at_time} OPERATOR(pg_catalog.<)
          (pg_catalog.now() OPERATOR(pg_catalog.-) %(older_than)s::pg_catalog.interval))
  AND (NOT %(no_lease)s::pg_catalog.bool OR {lease_missing})
  AND {mapped_filter}
ORDER BY j.{id}
LIMIT %(limit)s

-- name: quarantine_candidates
-- auto jobs reclaimed at least N times and not done, with their fence
SELECT {fence_columns}
FROM {table} j
WHERE {effective_policy} = 'auto' AND j.{reclaim_count} >= %(min_reclaims)s
  AND j.{status} <> {done}
ORDER BY j.{reclaim_count} DESC, j.{id}
LIMIT %(limit)s

-- name: manual_lockers
-- who holds the row an operator action waited for
SELECT {row_lockers} AS locked_by FROM {table} j WHERE j.{id} = %(id)s::text::{id_type}

-- name: awaiting_review
-- a job waiting for a human, the one place it is judged (review, summary, metrics, report,
-- top, explain, the manual writes): reclaim failed or parked it — it is in the park status
-- with reclaim's last_error (compared as text) — and nobody acted on it since (a requeue, a
-- fail with a reason, the application moving or rewriting it all end the wait). Reclaim parks
-- a job for a human only (reclaim_action): its effective policy is manual, it used all its
-- attempts, or --park-older-than found its claim too old; review_why says which
j.{status} = {parked} AND {last_error_text} = {reclaim_error_text}

-- name: review_candidates
-- the jobs that may await review (as {awaiting_candidates}, where jobctl.events is installed and
-- readable, db.spelling; else true: a scan of the jobs table), read from what jobctl itself
-- records so that no read of "awaits a human" scans the application's table: the jobs a
-- reclaim moved to the park status (the history's reclaimed events of this table,
-- {history_table}, by history migration 008's partial index events_reclaimed_idx), looked up
-- by the primary key, but for those whose reclaim the history shows was followed by a change
-- of the job's status or a fail by hand (a requeue, the application moving it: each ends the
-- wait; a policy changed on the parked job does not), so that the reclaims people acted on
-- long ago cost a probe of the history's job index, not a read of the jobs table. Only
-- candidates: awaiting_review, beside it, still decides (a job failed again with reclaim's
-- words is not one; an application's change the history did not record, under --history
-- audit, leaves the job a candidate that the row then refuses). An array, not a join: the planner
-- takes the primary key for it however many reclaims the history holds (a join of many
-- candidates it could hash against a scan of the table). A job parked with reclaim's words
-- that the history holds no such reclaim of (parked before the history was installed, by a
-- reclaim not jobctl's under --history audit, or whose events were purged) is not found here:
-- summary --exact counts every one (review_count_scan) and says how many the history misses
j.{id} = ANY (ARRAY(
    SELECT e.job_id::{id_type} FROM jobctl.events e
    WHERE e.job_table = {history_table} AND e.event = 'reclaimed'
      AND e.to_status = pg_catalog.format('%%s', {parked})
      AND NOT EXISTS (
          SELECT FROM jobctl.events later
          WHERE later.job_table = e.job_table AND later.job_id = e.job_id
            AND later.event_id > e.event_id
            AND (later.to_status IS DISTINCT FROM e.to_status
                 OR later.from_status IS DISTINCT FROM e.to_status
                 OR later.event = 'manually_failed'))))

-- name: review_why
-- why a job awaiting review waits: its effective policy is manual (by its row, kind or queue:
-- policy_from), it ran out of attempts, or reclaim parked it though neither holds now (its
-- claim was older than --park-older-than, or its policy was made auto after the reclaim)
CASE WHEN {effective_policy} = 'manual' THEN 'manual_policy'
     WHEN NOT {attempts_remain} THEN 'attempts_exhausted'
     ELSE 'parked' END

-- name: review
-- the jobs awaiting review, longest waiting first: each with the reclaim that parked it (its
-- time and worker from the history, by the job's own index; finished_at, else updated_at as a
-- time (one kept in epoch milliseconds too), where it has none)
-- and its fence (status, token, version) for a saved plan; the texts a row or the history
-- holds (kind, queue, worker, last_error) cut past %(cut)s characters (display_text)
SELECT j.{id} AS id, {mapped_columns} {review_why} AS why, {status_text} AS status,
       {shown_last_worker} AS last_worker, coalesce(r.at, {j_finished_at_time}) AS reclaimed_at,
       extract(epoch FROM now() - coalesce(r.at, {j_finished_at_time}, {j_updated_at_time}))::float8
           AS waited_s,
       j.{attempts} AS attempts, j.{max_attempts} AS max_attempts,
       j.{reclaim_count} AS reclaim_count, {shown_recovery_policy} AS recovery_policy,
       {policy_columns}
       {shown_last_error} AS last_error, j.{attempt_token} AS attempt_token,
       {j_updated_at_seen} AS updated_at, j.xmin::text AS row_version,
       {id_repeated} AS id_repeated
FROM {table} j
LEFT JOIN LATERAL (
    SELECT e.at, e.worker, {last_worker_bytes} AS worker_bytes FROM jobctl.events e
    WHERE e.job_table = %(job_table)s AND e.job_id = j.{id}::text COLLATE pg_catalog."C"
      AND e.event = 'reclaimed'
    ORDER BY e.event_id DESC LIMIT 1
) r ON true
WHERE {awaiting_candidates} AND {awaiting_review} AND {mapped_filter}
  AND (%(policy)s::text IS NULL OR {effective_policy} = %(policy)s)
  AND (%(worker)s::text IS NULL OR r.worker = %(worker)s)
  AND (%(since)s::interval IS NULL
       OR coalesce(r.at, {j_finished_at_time}, {j_updated_at_time}) >= now() - %(since)s::interval)
  AND (%(older_than)s::interval IS NULL
       OR coalesce(r.at, {j_finished_at_time}, {j_updated_at_time}) < now() - %(older_than)s::interval)
ORDER BY coalesce(r.at, {j_finished_at_time}, {j_updated_at_time}), j.{id}
LIMIT %(limit)s

-- name: review_count
-- how many jobs await review (summary, metrics, top, doctor, the service), and how many of
-- them are manual: exact, read through the history's candidates (review_candidates)
SELECT count(*) AS awaiting_review,
       count(*) FILTER (WHERE {effective_policy} = 'manual') AS awaiting_manual
FROM {table} j WHERE {awaiting_candidates} AND {awaiting_review} AND {mapped_filter}

-- name: review_count_scan
-- review_count by a scan of the whole jobs table (summary --exact): every job awaiting
-- review, the ones the history holds no reclaim of too (review_candidates)
SELECT count(*) AS awaiting_review,
       count(*) FILTER (WHERE {effective_policy} = 'manual') AS awaiting_manual
FROM {table} j WHERE {awaiting_review} AND {mapped_filter}

-- name: ready_now
-- a job ready to run: queued, available, and not of a paused kind or queue (the claim's own
-- condition, claim_unpaused: what a worker's claim would take now). A paused kind's queued
-- jobs are not ready: pause_waiting counts them apart, so that the queue's latency and its
-- alert say what the workers are failing to take, not what an operator held back
j.{status} OPERATOR(pg_catalog.=) {queued}
AND {available_now}{claim_pause_check}

-- name: available_now
-- a job whose ready time has come: available_at at or before now (as the column keeps it, a
-- time without a zone in the mapping's: available_at_now), or NULL where the column can hold
-- one ({ready_at}: the column, or COALESCE(j.available_at, '-infinity') for a nullable one:
-- one range of the claim's index, where "IS NULL OR" made the claim read past every job not
-- yet due). A queue that leaves its ready time NULL means "now" (OCA queue_job's eta,
-- Delayed::Job's run_at). The one judgement of a ready time: ready_now, and so the claim,
-- reads it
({ready_at} OPERATOR(pg_catalog.<=) {available_at_now})

-- name: oldest_ready_s
-- how long the oldest of the jobs ready_now finds has waited since it became available, in
-- seconds, read as the instant it is (j_available_at_time); a NULL ready time ("now") has
-- waited none, and one before a client's calendar (-infinity) is counted, not subtracted
extract(epoch FROM now() - min(coalesce({j_available_at_time}, now()))
                           FILTER (WHERE j.{available_at} IS NULL
                                      OR j.{available_at} >= {earliest_time}))::float8

-- name: queue_ready
-- jobs ready to run (ready_now): how many, and how long the oldest has waited since it
-- became available (NULL when none; queue index); an available_at before a client's calendar
-- (-infinity) is counted, not subtracted
SELECT count(*) AS ready,
       {oldest_ready_s} AS oldest_ready_s
FROM {table} j WHERE {ready_now} AND {mapped_filter}

-- name: events_window
-- the history's events of the jobs table in a time window, narrowed by the operator's filters;
-- bounds are a timestamp or an age (now() minus it), either NULL for open
e.job_table = %(job_table)s
AND e.at >= coalesce(%(since_at)s::timestamptz, now() - %(since)s::interval, '-infinity')
AND e.at < coalesce(%(until_at)s::timestamptz, now() - %(until)s::interval, 'infinity')
AND (%(events)s::text[] IS NULL OR e.event = ANY(%(events)s::text[]))
AND (%(actor)s::text IS NULL OR e.actor = %(actor)s)
AND (%(worker)s::text IS NULL OR e.worker = %(worker)s)
AND (%(ids)s::text[] IS NULL OR e.job_id = ANY(%(ids)s::text[]))
-- what the job is now (--kind, --queue, --error), by the job's row (its id index)
AND ((%(kinds)s::text[] IS NULL AND %(queues)s::text[] IS NULL AND %(error)s::text IS NULL)
     OR EXISTS (SELECT FROM {table} j
                WHERE j.{id} = e.job_id::{id_type} AND {mapped_filter}))

-- name: event_columns
-- one event across jobs as jobctl events shows it (the job's id back in the id column's type;
-- the texts a row or a role wrote cut for display, {shown_worker} ...: display_text)
e.at, e.job_id::{id_type} AS id, {event_mapped_columns} e.event, e.from_status, e.to_status,
e.attempt,
e.attempt_token, {shown_worker} AS worker, {shown_actor} AS actor, e.db_role,
{shown_reason} AS reason

-- name: event_optional_column
-- an optional column (kind, queue) of an event's job as its row says now, by the id index
-- ({value}: kind_value ...; none when the job is gone), in event_columns' select list
(SELECT {value} FROM {table} j WHERE j.{id} = e.job_id::{id_type}) AS {column_name},

-- name: events_newest
-- the history's events across jobs, newest first, streamed (the event time's index)
SELECT {event_columns} FROM jobctl.events e
WHERE {events_window}
ORDER BY e.at DESC, e.event_id DESC
LIMIT %(limit)s

-- name: events_oldest
-- the history's events across jobs, oldest first, streamed (the event time's index)
SELECT {event_columns} FROM jobctl.events e
WHERE {events_window}
ORDER BY e.at, e.event_id
LIMIT %(limit)s

-- name: pause_events_listed
-- the table's pauses and resumes (jobctl.pause_events, history 010) in jobctl events' window,
-- newest first ({order}: DESC, or empty for oldest first), by its (job_table, at) index: no
-- job, no worker, no error, so none with --worker, --id or --error; --kind and --queue keep
-- the pauses of those kinds and queues; the texts cut for display ({shown_value} ...)
SELECT e.at, e.dimension, {shown_value} AS value, e.event, {shown_actor} AS actor, e.db_role,
       {shown_reason} AS reason
FROM jobctl.pause_events e
WHERE e.job_table = %(job_table)s
  AND e.at >= coalesce(%(since_at)s::timestamptz, now() - %(since)s::interval, '-infinity')
  AND e.at < coalesce(%(until_at)s::timestamptz, now() - %(until)s::interval, 'infinity')
  AND (%(events)s::text[] IS NULL OR e.event = ANY(%(events)s::text[]))
  AND (%(actor)s::text IS NULL OR e.actor = %(actor)s)
  AND %(worker)s::text IS NULL AND %(ids)s::text[] IS NULL AND %(error)s::text IS NULL
  AND ((%(kinds)s::text[] IS NULL AND %(queues)s::text[] IS NULL)
       OR (e.dimension = 'kind' AND e.value = ANY(%(kinds)s::text[]))
       OR (e.dimension = 'queue' AND e.value = ANY(%(queues)s::text[])))
ORDER BY e.at {order}, e.event_id {order}
LIMIT %(limit)s

-- name: report_live_attempt
-- the attempt a reclaimed event (e) ended still had a live lease then; by the attempts' job
-- index, a semi-join the planner hashes (a lateral per event cost 5 s per 333k events)
EXISTS (SELECT FROM jobctl.attempts a
        WHERE a.job_table = e.job_table AND a.job_id = e.job_id
          AND a.attempt_token = e.attempt_token AND a.lease_expires_at > e.at)

-- name: report_jobctl_reclaim
-- a reclaimed event (e) that is jobctl's reclaim: the history calls any change that raised
-- reclaim_count reclaimed, jobctl's and any other role's alike. jobctl's declares its actor
-- (jobctl.actor: --actor, else user@host), which the trigger believes of jobctl's roles only:
-- any other role's event has that role as its actor (history_function_body), so a jobctl
-- reclaim's actor is not its database role (db_role unknown, before history version 2:
-- believed). And jobctl reclaims only a lease that ran out (expired_filter): not one the
-- attempt's row says was live (none kept in the audit history: believed)
e.event = 'reclaimed' AND e.actor IS DISTINCT FROM e.db_role AND NOT {report_live_attempt}

-- name: report_expired
-- an incident's expired leases, by the worker that held them: jobctl's reclaims of the
-- window, each with its attempt's lease expiry (events counted by id: an attempt token the
-- application wrote twice counts once); the first %(listed)s workers, with how many workers,
-- jobs and reclaims there are in all (the same on every row); grouped by the whole worker
-- name (as the history keeps it, and its whole length: {bytes_worker}), shown cut past
-- %(cut)s characters ({shown_worker}: kept_text)
SELECT {shown_worker} AS worker, count(DISTINCT e.job_id) AS jobs, count(DISTINCT e.event_id) AS reclaims,
       min(a.lease_expires_at) AS first_expiry, max(a.lease_expires_at) AS last_expiry,
       min(e.at) AS first_reclaim, max(e.at) AS last_reclaim,
       count(*) OVER () AS all_workers, sum(count(DISTINCT e.job_id)) OVER () AS all_jobs,
       sum(count(DISTINCT e.event_id)) OVER () AS all_reclaims
FROM jobctl.events e
LEFT JOIN jobctl.attempts a
       ON a.job_table = e.job_table AND a.job_id = e.job_id AND a.attempt_token = e.attempt_token
WHERE {events_window} AND {report_jobctl_reclaim}
GROUP BY e.worker, {bytes_worker}
ORDER BY count(DISTINCT e.event_id) DESC, min(e.at), e.worker
LIMIT %(listed)s

-- name: report_not_jobctl
-- the window's reclaimed events that are not jobctl's reclaims (report_jobctl_reclaim): a
-- role that is not jobctl's raised reclaim_count itself, or a lease still live was ended; by
-- the database role that made them, the first %(listed)s roles, with how many in all
WITH live AS (
    SELECT e.event_id FROM jobctl.events e
    WHERE {events_window} AND e.event = 'reclaimed' AND {report_live_attempt}
)
SELECT e.db_role, count(*) AS changes, count(DISTINCT e.job_id) AS jobs,
       count(l.event_id) AS live_leases, min(e.at) AS first_at, max(e.at) AS last_at,
       count(*) OVER () AS all_roles, sum(count(*)) OVER () AS all_changes
FROM jobctl.events e LEFT JOIN live l ON l.event_id = e.event_id
WHERE {events_window} AND e.event = 'reclaimed'
  AND (e.actor IS NOT DISTINCT FROM e.db_role OR l.event_id IS NOT NULL)
GROUP BY e.db_role
ORDER BY count(*) DESC, e.db_role
LIMIT %(listed)s

-- name: report_reclaims
-- what jobctl's reclaim did in the window: by who ran it and what the job became (the first
-- %(listed)s, with how many groups in all; the actor cut past %(cut)s characters)
SELECT {shown_actor} AS actor, e.to_status, count(*) AS reclaims, count(DISTINCT e.job_id) AS jobs,
       min(e.at) AS first_at, max(e.at) AS last_at, count(*) OVER () AS all_groups
FROM jobctl.events e
WHERE {events_window} AND {report_jobctl_reclaim}
GROUP BY e.actor, e.to_status
ORDER BY min(e.at), e.actor, e.to_status
LIMIT %(listed)s

-- name: report_repeats
-- jobs jobctl reclaimed more than once in the window (a crash loop, or a lease too short):
-- the first %(listed)s, with how many in all; the workers of those only (by the job index),
-- each cut past %(cut)s characters ({shown_worker})
SELECT r.job_id::{id_type} AS id, r.reclaims,
       (SELECT string_agg(DISTINCT {shown_worker}, ', ') FROM jobctl.events e
        WHERE {events_window} AND {report_jobctl_reclaim} AND e.job_id = r.job_id) AS workers,
       r.all_jobs
FROM (SELECT e.job_id, count(*) AS reclaims, count(*) OVER () AS all_jobs
      FROM jobctl.events e
      WHERE {events_window} AND {report_jobctl_reclaim}
      GROUP BY e.job_id
      HAVING count(*) > 1
      ORDER BY count(*) DESC, e.job_id
      LIMIT %(listed)s) r
ORDER BY r.reclaims DESC, r.job_id

-- name: report_people
-- what people did in the window: jobctl's writes other than reclaim (kinds the history
-- records only for a role of jobctl's that declared them), by actor, action and reason; the
-- first %(listed)s groups, with how many in all; each group's first 10 ids (the actor and
-- reason shown cut past %(cut)s characters, grouped as the history keeps them: {bytes_reason})
SELECT {shown_actor} AS actor, e.event, {shown_reason} AS reason, count(*) AS jobs,
       (array_agg(e.job_id::{id_type} ORDER BY e.at, e.event_id))[1:10] AS ids,
       min(e.at) AS first_at, max(e.at) AS last_at,
       string_agg(DISTINCT e.db_role, ', ') AS db_roles, count(*) OVER () AS all_groups
FROM jobctl.events e
WHERE {events_window}
  AND e.event IN ('requeued', 'manually_failed', 'cancelled', 'quarantined', 'policy_changed')
GROUP BY e.actor, e.event, e.reason, {bytes_reason}
ORDER BY min(e.at), e.actor, e.event
LIMIT %(listed)s

-- name: report_by_group
-- report by kind or queue ({group_key}: the mapped column of the job's row now):
-- the jobs whose lease jobctl's reclaim found expired in the window and what it made of them,
-- and the jobs still waiting for review; the first %(listed)s groups, with how many in all
-- (each group shown cut past %(cut)s characters: {shown_group}, display_text of g.grp)
SELECT {shown_group} AS grp, sum(g.expired_jobs)::pg_catalog.int8 AS expired_jobs,
       sum(g.requeued)::pg_catalog.int8 AS requeued, sum(g.parked)::pg_catalog.int8 AS parked,
       sum(g.awaiting_review)::pg_catalog.int8 AS awaiting_review,
       count(*) OVER () AS all_groups
FROM (
    SELECT {group_key} AS grp, count(DISTINCT e.job_id) AS expired_jobs,
           count(*) FILTER (WHERE e.to_status = pg_catalog.format('%%s', {queued})) AS requeued,
           count(*) FILTER (WHERE e.to_status <> pg_catalog.format('%%s', {queued})) AS parked,
           0 AS awaiting_review
    FROM jobctl.events e JOIN {table} j ON j.{id} = e.job_id::{id_type}
    WHERE {events_window} AND {report_jobctl_reclaim}
    GROUP BY 1
    UNION ALL
    SELECT {group_key}, 0, 0, 0, count(*) FROM {table} j
    WHERE {awaiting_candidates} AND {awaiting_review} AND {mapped_filter}
    GROUP BY 1
) g
GROUP BY g.grp
ORDER BY 2 DESC, 5 DESC, 1
LIMIT %(listed)s

-- name: report_review
-- how many jobs await review, by why (counted by the server: the report fetches only the
-- longest waiting of them, through the review block)
SELECT {review_why} AS why, count(*) AS jobs
FROM {table} j WHERE {awaiting_candidates} AND {awaiting_review} AND {mapped_filter}
GROUP BY 1 ORDER BY 1

-- name: report_latency
-- queue latency where the history can tell it: for each return to the queue in the window
-- (reclaim, requeue, retry), the time to the job's next claim (an ended attempt's claim, or
-- the live one's in the row); still queued and never claimed since: waiting
WITH back AS (
    SELECT e.job_id, e.at FROM jobctl.events e
    WHERE {events_window} AND e.to_status = pg_catalog.format('%%s', {queued})
), claimed AS (
    SELECT b.at,
           least((SELECT min(a.claimed_at) FROM jobctl.attempts a
                  WHERE a.job_table = %(job_table)s AND a.job_id = b.job_id
                    AND a.claimed_at >= b.at),
                 CASE WHEN j.{status} = {processing} AND {j_reserved_at_time} >= b.at
                      THEN {j_reserved_at_time} END) AS claimed_at,
           j.{status} = {queued} AS queued_now
    FROM back b LEFT JOIN {table} j ON j.{id} = b.job_id::{id_type}
)
SELECT count(*) AS returned,
       count(claimed_at) AS claimed,
       count(*) FILTER (WHERE claimed_at IS NULL AND queued_now) AS waiting,
       count(*) FILTER (WHERE claimed_at IS NULL AND NOT coalesce(queued_now, false))
           AS unknown,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - at))
           AS p50_s,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - at))
           AS p95_s,
       max(extract(epoch FROM claimed_at - at))::float8 AS max_s,
       max(extract(epoch FROM now() - at)) FILTER (WHERE claimed_at IS NULL AND queued_now)
           ::float8 AS longest_waiting_s
FROM claimed

-- name: report_bounds
-- the window's bounds in the database's time
SELECT coalesce(%(since_at)s::timestamptz, now() - %(since)s::interval) AS since,
       coalesce(%(until_at)s::timestamptz, now() - %(until)s::interval, now()) AS until

-- name: complete_ids
-- job ids for shell completion
SELECT {id}::text AS id FROM {table}
WHERE {id}::text LIKE %(prefix)s || '%%'
  AND {status} IN ({processing}, {failed}, {parked}, {cancelled})
ORDER BY {id} LIMIT 50

-- name: complete_workers
-- the workers holding processing jobs, for shell completion of --worker: none longer than
-- 1,024 bytes (no one types it; 50 names of 30 MB would be 1.5 GB for a TAB)
SELECT DISTINCT {reserved_by}::text AS worker FROM {table}
WHERE {status} = {processing} AND {reserved_by}::text LIKE %(prefix)s || '%%'
  AND pg_catalog.octet_length({reserved_by}::text) <= 1024
ORDER BY 1 LIMIT 50

-- name: claim
-- the lease design's claim: one ready job, a new token, a fresh lease. The worker API's
-- statements (claim, heartbeat, complete, worker_fail, job_outcome) run in the workers'
-- autocommit, under their session's search_path: every function, operator and type in them
-- is named with its schema (tests/unit/test_sql_search_path.py). It takes a job ready_now
-- judges ready (the one judgement summary, metrics, report and top count as ready): a job
-- whose kind or queue is paused is passed over (claim_unpaused, where jobctl.pauses exists
-- and the table maps a kind or queue). The oldest available first ({ready_at}: a NULL ready
-- time first, as available_now compares it); where the table maps a priority, by it before
-- that ({claim_order}: the lowest first, or the highest with --priority-order desc)
WITH target AS (
    SELECT {id} AS id FROM {table} j
    WHERE {ready_now}
    ORDER BY {claim_order}{ready_at}, {id}
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
UPDATE {table} AS j
SET {status} = {processing},
    {reserved_by} = {worker_value},
    {reserved_at} = {reserved_at_now},
    {lease_expires_at} = pg_catalog.now() OPERATOR(pg_catalog.+) %(lease)s::pg_catalog.interval,
    {attempt_token} = %(attempt_token)s,
    {attempts} = j.{attempts} OPERATOR(pg_catalog.+) 1,
    {updated_at} = {updated_at_now}
FROM target
WHERE j.{id} OPERATOR(pg_catalog.=) target.id
RETURNING j.{id} AS id, j.{attempt_token} AS attempt_token, j.{attempts} AS attempts,
          j.{lease_expires_at} AS lease_expires_at

-- name: heartbeat
-- the lease design's heartbeat: extend the lease of the attempt this worker holds
UPDATE {table}
SET {heartbeat_at} = pg_catalog.now(),
    {lease_expires_at} = pg_catalog.now() OPERATOR(pg_catalog.+) %(lease)s::pg_catalog.interval,
    {updated_at} = {updated_at_now}
WHERE {id} OPERATOR(pg_catalog.=) %(id)s::pg_catalog.text::{id_type}
  AND {status} OPERATOR(pg_catalog.=) {processing}
  AND {reserved_by} OPERATOR(pg_catalog.=) {worker_value}
  AND {attempt_token} OPERATOR(pg_catalog.=) %(attempt_token)s
-- 0 rows: the attempt was reclaimed or cancelled; stop the work
RETURNING {lease_expires_at} AS lease_expires_at

-- name: complete
-- the lease design's completion, fenced by the attempt token. The token stays on the done row
-- (the design clears it): the one proof that this attempt, and no later one, completed the
-- job, which job_outcome reads after a lost acknowledgement. Only a claim writes a token, and
-- each claim a new one, so no operator write can make another attempt's completion look like
-- this one's (attempts, which --refund-attempt winds back, can)
UPDATE {table}
SET {status} = {done},
    {reserved_by} = NULL, {reserved_at} = NULL, {heartbeat_at} = NULL,
    {lease_expires_at} = NULL,
    {finished_at} = {finished_at_now}, {updated_at} = {updated_at_now}
WHERE {id} OPERATOR(pg_catalog.=) %(id)s::pg_catalog.text::{id_type}
  AND {status} OPERATOR(pg_catalog.=) {processing}
  AND {attempt_token} OPERATOR(pg_catalog.=) %(attempt_token)s
RETURNING {id} AS id

-- name: worker_fail
-- a worker gives up its attempt: retry later while attempts remain (attempts_remain), else failed
UPDATE {table} AS j
SET {status} = CASE WHEN {attempts_remain}
                    THEN {queued} ELSE {failed} END,
    {available_at} = CASE WHEN {attempts_remain}
                          THEN {available_at_now}
                               OPERATOR(pg_catalog.+) %(retry_delay)s::pg_catalog.interval
                          ELSE {available_at} END,
    {finished_at} = CASE WHEN {attempts_remain}
                         THEN NULL ELSE {finished_at_now} END,
    {last_error} = {error_value},
    {reserved_by} = NULL, {reserved_at} = NULL, {heartbeat_at} = NULL,
    {lease_expires_at} = NULL, {attempt_token} = NULL,
    {updated_at} = {updated_at_now}
WHERE {id} OPERATOR(pg_catalog.=) %(id)s::pg_catalog.text::{id_type}
  AND {status} OPERATOR(pg_catalog.=) {processing}
  AND {attempt_token} OPERATOR(pg_catalog.=) %(attempt_token)s
RETURNING pg_catalog.format('%%s', {status}) AS status, {status} OPERATOR(pg_catalog.=) {queued} AS retried

-- name: job_outcome
-- after an unacknowledged completion: is the job done by this very attempt (its token still on
-- the done row: complete keeps it)? Never judged by a counter: attempts can be wound back
SELECT {status} OPERATOR(pg_catalog.=) {done} AND {attempt_token} IS NOT NULL
       AND {attempt_token} OPERATOR(pg_catalog.=) %(attempt_token)s AS completed_by_it
FROM {table}
WHERE {id} OPERATOR(pg_catalog.=) %(id)s::pg_catalog.text::{id_type}

-- name: job_ids
-- job ids as typed (text), converted to the id column's type by the database, in their order
SELECT i.id FROM unnest(%(ids)s::text[]::{id_type}[]) WITH ORDINALITY AS i(id, n) ORDER BY i.n

-- name: now
-- the database's time (the transaction's start), which every age is measured against
SELECT now() AS at

-- name: lock_holders
-- sessions in a transaction since before a schema step began that hold a lock on the jobs table or jobctl's tables (whom the step waited for): the jobs table's first, then the oldest, at most 3
WITH holder AS (
    SELECT DISTINCT ON (a.pid) a.pid, a.xact_start, l.relation = %(table_oid)s::oid AS on_jobs,
           {session_description} AS description
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND (l.relation = %(table_oid)s::oid
           OR l.relation IN (SELECT c.oid FROM pg_class c
                             WHERE c.relnamespace = to_regnamespace('jobctl')))
      AND a.xact_start < %(since)s
    ORDER BY a.pid, l.relation = %(table_oid)s::oid DESC
)
SELECT string_agg(h.description, '; ' ORDER BY h.on_jobs DESC, h.xact_start) AS holders
FROM (SELECT * FROM holder ORDER BY on_jobs DESC, xact_start LIMIT 3) h

-- name: waiting_for
-- who holds up a backend (pg_blocking_pids), and its index build's phase if any
SELECT (SELECT string_agg({session_description}, '; ' ORDER BY a.xact_start)
        FROM pg_stat_activity a WHERE a.pid = ANY(pg_blocking_pids(%(pid)s))) AS blockers,
       (SELECT p.phase FROM pg_stat_progress_create_index p WHERE p.pid = %(pid)s) AS phase

-- name: concurrent_lock_probe
-- the first lock CREATE INDEX CONCURRENTLY takes, tried under lock_timeout
LOCK TABLE {table} IN SHARE UPDATE EXCLUSIVE MODE

-- name: table_has_rows
-- whether the jobs table holds any row (an index on an empty table needs no CONCURRENTLY)
SELECT EXISTS (SELECT FROM {table}) AS e

-- name: repeated_id
-- an id that more than one row of the table holds (a partitioned table keyed on the id and its
-- partition key: the same id in two partitions), with how many rows hold it; none: no row
SELECT j.{id}::pg_catalog.text AS id, pg_catalog.count(*) AS rows
FROM {table} j
GROUP BY j.{id}
HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 1
LIMIT 1

-- name: lease_consistency
-- processing rows reclaim can never see (no lease or no token), and token/status mismatches:
-- a token is held by a processing row, and kept by a done one (complete keeps the token of the
-- attempt that completed it), never by a row in any other status
SELECT count(*) FILTER (WHERE {status} = {processing} AND {lease_missing}) AS invisible,
       count(*) FILTER (WHERE {status} <> {processing} AND {status} <> {done}
                          AND {attempt_token} IS NOT NULL) AS inconsistent
FROM {table} j

-- name: local_lock_timeout
-- lock_timeout for the current transaction only (a step's short try)
SELECT pg_catalog.set_config('lock_timeout', %(timeout)s, true)

-- name: demo_jobs
-- the demo's queue: 300 jobs, every third a card charge (manual policy)
INSERT INTO {table} (queue, recovery_policy, payload)
SELECT CASE WHEN g %% 3 = 0 THEN 'charge-card' ELSE 'render-thumbnail' END,
       CASE WHEN g %% 3 = 0 THEN 'manual' ELSE 'auto' END, jsonb_build_object('n', g)
FROM generate_series(1, %(count)s) g

-- name: demo_parked_job
-- the demo's first manual job that reclaim failed, for an operator to requeue
SELECT id FROM {table}
WHERE status = 'failed' AND recovery_policy = 'manual' AND reclaim_count > 0
ORDER BY id LIMIT 1

-- name: transaction_settings
-- jobctl's timeouts and audit settings for the current transaction only (never the session's:
-- behind a pooler it is shared); {read_only} makes the transaction read only first, or is empty.
-- search_path first ({search_path}: 'pg_catalog, pg_temp', or write_search_path): nothing
-- jobctl runs after it resolves a name through a schema another role can write ahead of
-- pg_catalog (pg_temp last, so it is not searched first); this statement itself names every
-- function it calls (it runs under the session's search_path). {origin_session}: a write's
-- guard (a read's transaction leaves it empty); {parse_settings}: the output styles it parses.
-- row_security off: a row security policy on a table jobctl reads or writes is an expression
-- of the application's, run as jobctl's role for every row; off, PostgreSQL refuses the query
-- instead (42501, db.failures says which policies and the ways out) unless the role bypasses
-- row security (a superuser, BYPASSRLS, the table's owner without FORCE)
SELECT pg_catalog.set_config('search_path', {search_path}, true),
       pg_catalog.set_config('row_security', 'off', true),
       {role}
       {read_only}
       {origin_session}
       {parse_settings}
       {jit_setting}
       pg_catalog.set_config('statement_timeout', %(st)s, true),
       pg_catalog.set_config('lock_timeout', %(lt)s, true),
       pg_catalog.set_config('jobctl.actor', %(actor)s, true),
       pg_catalog.set_config('jobctl.action', %(action)s, true),
       pg_catalog.set_config('jobctl.reason', %(reason)s, true)

-- name: role_setting
-- the role a write of the jobs table runs as, for the current transaction only (SET LOCAL ROLE:
-- jobctl's operator role, when the session's role holds privileges the table's owner lacks;
-- the table's triggers, checks and defaults, the application's code, then run with no more)
pg_catalog.set_config('role', %(role)s, true),

-- name: read_only_setting
-- the current transaction read only (transaction-locally, unlike SET TRANSACTION READ ONLY)
pg_catalog.set_config('transaction_read_only', 'on', true),

-- name: lag_held_back
-- leases the operator's filter calls expired that expired within a standby's replay lag: a
-- worker may have extended them on the primary since (ops/standby.py)
SELECT count(*) AS held_back FROM {table} j
WHERE {expired_filter}
  AND j.{lease_expires_at} >= now() - %(grace)s::interval - %(lag)s::interval

-- name: status_sample
-- the distinct status values among the first rows the table gives, at most %(rows)s rows read
-- (a bounded read on a big table: the scan stops there), to judge a status mapping by
SELECT DISTINCT pg_catalog.format('%%s', j.s) AS value
FROM (SELECT {status} AS s FROM {table} LIMIT %(rows)s) AS j
WHERE j.s IS NOT NULL

-- name: safe_search_path
-- jobctl's search_path for the current transaction only: pg_catalog, then pg_temp (last, so
-- that it is not searched first); no schema another role can write
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)

-- name: write_search_path
-- the search path of jobctl's writes to the jobs table: pg_catalog first, then the session's
-- own (as its role and database set it), then pg_temp. The application's triggers on the table
-- run in the write and find their own objects as in the workers' writes; jobctl's statement
-- resolves every name in pg_catalog first (an object of the same name and arguments elsewhere
-- is never reached; the write statements call nothing that another schema could match better).
-- The session's own is its reset value, which set_config with a NULL value sets (SET LOCAL ...
-- TO DEFAULT) and returns: not read from pg_settings, whose every GUC formatted cost each batch
-- of a reclaim 0.7 ms on the server; set over at once by the statement this is part of
(WITH s AS (SELECT pg_catalog.set_config('search_path', NULL, true) AS reset_val)
 SELECT pg_catalog.concat_ws(', ', 'pg_catalog',
                             CASE WHEN s.reset_val OPERATOR(pg_catalog.=) '' THEN NULL
                                  ELSE s.reset_val END,
                             'pg_temp')
 FROM s)

-- name: user_search_path
-- the session's own search_path (as its role, database and options set it), for the current
-- transaction only: to find a table named as typed, the one thing resolved through it (a NULL
-- value is set_config's reset: SET LOCAL search_path TO DEFAULT, pg_settings' reset_val)
SELECT pg_catalog.set_config('search_path', NULL, true)

-- name: parse_settings
-- the output styles psycopg parses, for the current transaction only (like the timeouts):
-- a database or role may set others (ALTER DATABASE ... SET DateStyle = 'German', IntervalStyle
-- = 'sql_standard', extra_float_digits = -15), which psycopg cannot read back (a timestamp, an
-- interval) or reads less exactly (a float8). TimeZone is kept: psycopg reads any offset, and
-- times are shown in the database's zone (one Python does not know: in UTC, the same instant)
pg_catalog.set_config('DateStyle', 'ISO, MDY', true),
pg_catalog.set_config('IntervalStyle', 'postgres', true),
pg_catalog.set_config('extra_float_digits', '1', true),

-- name: jit_setting
-- no JIT compiling in jobctl's transactions, for the current transaction only (like the
-- timeouts: behind a pooler the session is shared). A server with jit = on (Debian's, most
-- clouds') compiles any statement whose plan costs more than jit_above_cost (100,000), and
-- inlines and optimizes past 500,000: 0.1-0.5 s on every call for statements that run in
-- milliseconds. jobctl's reads cost what the incident's rows cost, so a big enough incident (a
-- stuck of 100,000 processing rows, a count on a 10M-row table) would cross them; compiling
-- never pays back for statements that read each row once (docs/reference/performance.md)
pg_catalog.set_config('jit', 'off', true),

-- name: safe_transaction_settings
-- a transaction (or savepoint) on jobctl's search_path, with the output styles it parses, for
-- the catalog reads that need no timeouts of their own (db.safe); row_security off, as in
-- transaction_settings: no policy's expression runs as jobctl's role
SELECT {parse_settings}
       pg_catalog.set_config('row_security', 'off', true),
       {jit_setting}
       pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)

-- name: origin_session
-- a write's guard, in its own transaction's first statement: refused unless the session's
-- session_replication_role is origin. Under replica (a DSN's options='-c
-- session_replication_role=replica', ALTER ROLE ... SET) or local, no ordinary trigger fires
-- (jobctl's audit, the application's) nor a foreign key's check. The refusal is an error of
-- this statement, so nothing of the transaction is written: current_setting of a name no one
-- can set (it holds spaces) is 42704, its text naming the role (db.database_error: one line)
pg_catalog.current_setting(
    CASE WHEN pg_catalog.current_setting('session_replication_role')
              OPERATOR(pg_catalog.=) 'origin'
         THEN 'session_replication_role'
         ELSE 'jobctl refuses session_replication_role '
              OPERATOR(pg_catalog.||) pg_catalog.current_setting('session_replication_role')
    END) AS replication_role,

-- name: record_reclaimer_pass
-- the reclaimer's heartbeat: one row per reclaimer of a table, its pass counted and dated
-- (jobctl.reclaimer_passes, history migration 007)
INSERT INTO jobctl.reclaimer_passes AS p
    (job_table, reclaimer, host, pid, every_s, last_requeued, last_parked, requeued_total,
     parked_total, notices_sent, notices_failed)
VALUES (%(job_table)s, %(reclaimer)s, %(host)s, %(pid)s, %(every_s)s, %(requeued)s,
        %(parked)s, %(requeued)s, %(parked)s, %(sent)s, %(failed)s)
ON CONFLICT (job_table, reclaimer) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    db_role = current_user,
    every_s = excluded.every_s,
    started_at = CASE WHEN p.pid OPERATOR(pg_catalog.=) excluded.pid
                       AND p.host OPERATOR(pg_catalog.=) excluded.host
                      THEN p.started_at ELSE pg_catalog.now() END,
    last_pass_at = pg_catalog.now(),
    passes = p.passes OPERATOR(pg_catalog.+) 1,
    last_requeued = excluded.last_requeued,
    last_parked = excluded.last_parked,
    requeued_total = p.requeued_total OPERATOR(pg_catalog.+) excluded.last_requeued,
    parked_total = p.parked_total OPERATOR(pg_catalog.+) excluded.last_parked,
    notices_sent = excluded.notices_sent,
    notices_failed = excluded.notices_failed

-- name: reclaimer_passes_readable
-- whether this database has the reclaimer's record (migration 006) and this role may read it
SELECT CASE WHEN pg_catalog.to_regclass('jobctl.reclaimer_passes') IS NULL THEN false
            ELSE pg_catalog.has_table_privilege('jobctl.reclaimer_passes', 'SELECT') END
       AS readable

-- name: metrics_reclaimer
-- the table's reclaimer passes: how many, the last one's time (NULL: never) and the shortest
-- interval of its reclaimers, for metrics and summary
SELECT coalesce(sum(passes), 0)::bigint AS reclaimer_passes,
       extract(epoch FROM max(last_pass_at))::float8 AS reclaimer_last_pass,
       extract(epoch FROM now() - max(last_pass_at))::float8 AS reclaimer_idle_s,
       min(every_s) AS reclaimer_every_s,
       coalesce(sum(notices_failed), 0)::bigint AS notices_failed
FROM jobctl.reclaimer_passes WHERE job_table = %(job_table)s
