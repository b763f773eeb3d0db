-- What schema remove reads and runs: jobctl's way back out of a jobs table (jobctl/remove.py).
-- Named blocks in the namespace of queries.sql, catalog.sql and schema.sql. %(oid)s is the
-- jobs table's oid, %(job_table)s its name as the history records it (format('%I.%I')).

-- name: remove_trigger
-- a history trigger off the jobs table (on a partitioned table, with its clones on every
-- partition); DROP TRIGGER takes an ACCESS EXCLUSIVE lock: tried in short tries
DROP TRIGGER IF EXISTS {trigger} ON {table}

-- name: remove_function
-- a jobs table's own history function, once no trigger calls it
DROP FUNCTION IF EXISTS {function}()

-- name: remove_functions_present
-- which of these functions of schema jobctl (names, no arguments) exist
SELECT p.proname::text AS name
FROM pg_proc p
WHERE p.pronamespace = to_regnamespace('jobctl') AND p.proname::text = ANY(%(names)s::text[])
  AND p.pronargs = 0

-- name: remove_history_relations
-- which of the history's tables exist here (the schema may be gone, or older)
SELECT to_regnamespace('jobctl') IS NOT NULL AS has_schema,
       to_regclass('jobctl.events') IS NOT NULL AS has_events,
       to_regclass('jobctl.attempts') IS NOT NULL AS has_attempts,
       to_regclass('jobctl.tables') IS NOT NULL AS has_tables

-- name: remove_count_events
-- how many events of the history are this table's (the index on job_table serves it)
SELECT count(*) AS n FROM jobctl.events WHERE job_table = %(job_table)s

-- name: remove_count_attempts
-- how many attempts of the history are this table's
SELECT count(*) AS n FROM jobctl.attempts WHERE job_table = %(job_table)s

-- name: remove_has_mapping
-- whether schema apply recorded names for this table
SELECT EXISTS (SELECT FROM jobctl.tables WHERE job_table = %(job_table)s) AS e

-- name: remove_others_mapped
-- the other jobs tables whose names schema apply recorded
SELECT job_table FROM jobctl.tables WHERE job_table <> %(job_table)s

-- name: remove_others_triggered
-- the other tables with a trigger calling a function of schema jobctl (a partition's clone of
-- its parent's trigger is the parent's)
SELECT DISTINCT format('%%I.%%I', n.nspname, c.relname) AS job_table
FROM pg_trigger t
JOIN pg_proc p ON p.oid = t.tgfoid
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.pronamespace = to_regnamespace('jobctl') AND t.tgparentid = 0
  AND t.tgrelid <> %(oid)s

-- name: remove_others_in_events
-- another table's events, if any: the first name before and after this one (two index probes,
-- not a scan of the history)
(SELECT job_table FROM jobctl.events WHERE job_table < %(job_table)s
 ORDER BY job_table DESC LIMIT 1)
UNION ALL
(SELECT job_table FROM jobctl.events WHERE job_table > %(job_table)s
 ORDER BY job_table LIMIT 1)

-- name: remove_others_in_attempts
-- another table's attempts, if any (as remove_others_in_events)
(SELECT job_table FROM jobctl.attempts WHERE job_table < %(job_table)s
 ORDER BY job_table DESC LIMIT 1)
UNION ALL
(SELECT job_table FROM jobctl.attempts WHERE job_table > %(job_table)s
 ORDER BY job_table LIMIT 1)

-- name: remove_foreign_objects
-- what schema jobctl holds that jobctl did not make (the schema is then kept): relations but
-- its tables (their indexes, sequences and row types go with them; kind_policies and
-- kind_policy_events since history 006, reclaimer_passes since 007, pauses and pause_events
-- since 010), functions but its
-- record_* ones, and types of their own
SELECT format('%%I', c.relname) AS name
FROM pg_class c
WHERE c.relnamespace = to_regnamespace('jobctl') AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND c.relname::text NOT IN ('events', 'attempts', 'migrations', 'tables', 'kind_policies',
                              'kind_policy_events', 'reclaimer_passes', 'pauses',
                              'pause_events')
UNION ALL
SELECT format('%%I()', p.proname)
FROM pg_proc p
WHERE p.pronamespace = to_regnamespace('jobctl')
  AND (p.proname::text NOT LIKE 'record\_%%' OR p.pronargs <> 0)
UNION ALL
SELECT format('type %%I', t.typname)
FROM pg_type t
WHERE t.typnamespace = to_regnamespace('jobctl') AND t.typrelid = 0 AND t.typelem = 0
ORDER BY 1

-- name: remove_history_functions
-- the history's functions in schema jobctl (the shared ones of versions 1-2, each table's)
SELECT p.proname::text AS name
FROM pg_proc p
WHERE p.pronamespace = to_regnamespace('jobctl') AND p.proname::text LIKE 'record\_%%'
  AND p.pronargs = 0
ORDER BY 1

-- name: remove_history_rows
-- this table's rows of the history (the schema stays: other tables' history is in it)
DELETE FROM jobctl.events WHERE job_table = {job_table};
DELETE FROM jobctl.attempts WHERE job_table = {job_table}

-- name: remove_history_schema
-- schema jobctl and everything of it ({functions}: DROP FUNCTION of each), no CASCADE: an
-- object of someone else's that depends on it stops the step, nothing dropped
DROP TABLE IF EXISTS jobctl.events, jobctl.attempts, jobctl.tables, jobctl.migrations,
    jobctl.kind_policies, jobctl.kind_policy_events, jobctl.reclaimer_passes, jobctl.pauses,
    jobctl.pause_events;
{functions}DROP SCHEMA IF EXISTS jobctl

-- name: remove_mapping_row
-- the names schema apply recorded for this table (its lease columns are gone)
DELETE FROM jobctl.tables WHERE job_table = {job_table}

-- name: remove_kind_policies
-- the table's policies per kind and queue (history 006): left, they would steer its reclaim
-- again, unseen, the day the lease design is applied to it anew; their changes stay in
-- kind_policy_events, with this removal as the last
WITH removed AS (
    DELETE FROM jobctl.kind_policies p WHERE p.job_table OPERATOR(pg_catalog.=) {job_table}
    RETURNING p.job_table, p.dimension, p.value
)
INSERT INTO jobctl.kind_policy_events (job_table, dimension, value, policy, reason, actor)
SELECT removed.job_table, removed.dimension, removed.value, NULL, 'jobctl schema remove',
       pg_catalog.current_setting('jobctl.actor', true)
FROM removed

-- name: remove_pauses
-- the table's pauses (history 010): left, they would stop its workers' claims again, unseen,
-- the day the lease design is applied to it anew; each is recorded as resumed by this removal
WITH removed AS (
    DELETE FROM jobctl.pauses p WHERE p.job_table OPERATOR(pg_catalog.=) {job_table}
    RETURNING p.job_table, p.dimension, p.value
)
INSERT INTO jobctl.pause_events (job_table, dimension, value, event, reason, actor)
SELECT removed.job_table, removed.dimension, removed.value, 'resumed', 'jobctl schema remove',
       pg_catalog.current_setting('jobctl.actor', true)
FROM removed

-- name: remove_live_leases
-- rows processing with a live lease now (their workers write the lease columns), and with an
-- expired or no lease (they would stay processing, nothing left to expire)
SELECT count(*) FILTER (WHERE {lease_expires_at} > now()) AS n,
       count(*) FILTER (WHERE NOT coalesce({lease_expires_at} > now(), false)) AS expired
FROM {table}
WHERE {status} = {processing}

-- name: remove_lock_table
-- the jobs table (and its partitions), for dropping columns: tried in short tries
LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE

-- name: remove_live_lease_guard
-- under the lock, the refusal again: a worker may have claimed since remove was planned
-- ({tag}: a dollar quote that occurs nowhere in the body; operators named with their schema)
DO {tag}
BEGIN
    IF EXISTS (SELECT FROM {table}
               WHERE {status} OPERATOR(pg_catalog.=) {processing}
                 AND {lease_expires_at} OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        RAISE EXCEPTION 'jobctl: a row is processing with a live lease: its worker writes the lease columns; nothing removed';
    END IF;
END
{tag}

-- name: remove_columns
-- the columns and checks jobctl added ({drops}: remove_drop_constraint, remove_drop_column);
-- an index on a dropped column goes with it; a view on one stops the step (no CASCADE)
ALTER TABLE {table} {drops}

-- name: remove_drop_constraint
-- one of jobctl's checks
DROP CONSTRAINT IF EXISTS {constraint}

-- name: remove_drop_column
-- one of the columns jobctl added (no rewrite: a catalog change)
DROP COLUMN IF EXISTS {column}

-- name: remove_column_indexes
-- the indexes that would go with these columns (an index on a dropped column is dropped)
SELECT DISTINCT c.relname::text AS name
FROM pg_depend d
JOIN pg_class c ON c.oid = d.objid
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
  AND d.refobjid = %(oid)s AND a.attname::text = ANY(%(names)s::text[])
  AND c.relkind IN ('i', 'I')
ORDER BY 1
