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

-- name: remove_suggested_columns
-- the table's columns that jobctl asked the user to add (schema apply's suggested ADD COLUMN
-- left %(comment)s on each): schema remove names them, never drops them
SELECT a.attname::text AS name
FROM pg_attribute a
WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
  AND col_description(a.attrelid, a.attnum) = %(comment)s
ORDER BY a.attnum

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
-- record_* ones, refuse (since 013) and the tables' reclaimer functions (reclaim_*: schema
-- grants --reclaimer), and types of their own
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
  AND p.oid <> coalesce(to_regprocedure('jobctl.refuse(pg_catalog.text, pg_catalog.text)')::oid,
                        0)
  AND NOT (p.proname::text LIKE 'reclaim\_%%' AND p.prosecdef)
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
-- schema jobctl and everything of it ({functions}: DROP FUNCTION of each; refuse, history
-- 013's), no CASCADE: an object of someone else's that depends on it stops the step, nothing
-- dropped (and remove_dependents refuses the removal before its first step)
DROP TABLE IF EXISTS jobctl.events, jobctl.attempts, jobctl.tables, jobctl.migrations,
    jobctl.kind_policies, jobctl.kind_policy_events, jobctl.reclaimer_passes, jobctl.pauses,
    jobctl.pause_events;
DROP FUNCTION IF EXISTS jobctl.refuse(pg_catalog.text, pg_catalog.text);
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
-- rows processing with a live lease now (their workers write the lease columns), and those
-- that would stay processing, nothing left to expire: with an expired lease reclaim can take
-- (an expiry and a token), and with no lease (lease_missing, as everywhere: an expiry with no
-- token is none; reclaim never touches them)
SELECT count(*) FILTER (WHERE NOT {lease_missing} AND j.{lease_expires_at} > now()) AS n,
       count(*) FILTER (WHERE NOT {lease_missing} AND j.{lease_expires_at} <= now()) AS expired,
       count(*) FILTER (WHERE {lease_missing}) AS no_lease
FROM {table} j
WHERE j.{status} = {processing}

-- name: remove_lock_table
-- the jobs table (and its partitions), for dropping columns: tried in short tries
LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE

-- name: remove_live_lease_guard
-- under the lock, the refusal again: a worker may have claimed since remove was planned
-- ({tag}: a dollar quote that occurs nowhere in the body; operators named with their schema)
DO {tag}
BEGIN
    IF EXISTS (SELECT FROM {table} j
               WHERE j.{status} OPERATOR(pg_catalog.=) {processing} AND NOT {lease_missing}
                 AND j.{lease_expires_at} OPERATOR(pg_catalog.>) pg_catalog.now()) THEN
        RAISE EXCEPTION 'jobctl: a row is processing with a live lease: its worker writes the lease columns; nothing removed';
    END IF;
END
{tag}

-- name: remove_columns
-- the columns and checks jobctl added ({drops}: remove_drop_constraint, remove_drop_column);
-- an index on a dropped column goes with it; a view on one stops the step (no CASCADE; and
-- remove_dependents refuses the removal before its first step)
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

-- name: remove_dependents
-- what depends on the objects the steps would drop and would stop a step (a DROP without
-- CASCADE fails on it), read before any step runs. Dropped: the jobs table's columns named
-- (on its partitions and children too: the drop recurses), its checks, its index and its
-- triggers named, schema jobctl's functions named (no arguments), and when asked schema
-- jobctl, its tables and its function refuse (history 013); with them what PostgreSQL drops along (an auto or internal
-- dependency: an index on a dropped column, a table's row type, a view's rule, a partition's
-- clone). Their other dependents, by pg_depend's normal dependencies, refuse: views and
-- materialized views (their rule named as the view), foreign keys, columns of a dropped type,
-- defaults and generated columns (named as the column), triggers, policies, functions with a
-- SQL body, objects in schema jobctl it did not make. Each once, with what it depends on
WITH RECURSIVE tree (relid) AS (
    SELECT %(oid)s::pg_catalog.oid
    UNION
    SELECT i.inhrelid
    FROM pg_catalog.pg_inherits i
    JOIN tree ON i.inhparent OPERATOR(pg_catalog.=) tree.relid
),
target (classid, objid, objsubid) AS (
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, a.attrelid,
           a.attnum::pg_catalog.int4
    FROM pg_catalog.pg_attribute a
    JOIN tree ON a.attrelid OPERATOR(pg_catalog.=) tree.relid
    WHERE a.attname::pg_catalog.text OPERATOR(pg_catalog.=) ANY(%(columns)s::pg_catalog.text[])
      AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
      AND (a.attrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid OR NOT a.attislocal)
    UNION ALL
    SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid, c.oid, 0
    FROM pg_catalog.pg_constraint c
    WHERE c.conrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
      AND c.conname::pg_catalog.text OPERATOR(pg_catalog.=) ANY(%(checks)s::pg_catalog.text[])
    UNION ALL
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, i.indexrelid, 0
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.indexrelid
    WHERE i.indrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
      AND c.relname::pg_catalog.text OPERATOR(pg_catalog.=) %(index)s::pg_catalog.text
    UNION ALL
    SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass::pg_catalog.oid, t.oid, 0
    FROM pg_catalog.pg_trigger t
    WHERE t.tgrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
      AND t.tgname::pg_catalog.text OPERATOR(pg_catalog.=) ANY(%(triggers)s::pg_catalog.text[])
    UNION ALL
    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid, 0
    FROM pg_catalog.pg_proc p
    WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
      AND p.pronargs OPERATOR(pg_catalog.=) 0
      AND p.proname::pg_catalog.text OPERATOR(pg_catalog.=) ANY(%(functions)s::pg_catalog.text[])
    UNION ALL
    SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass::pg_catalog.oid, n.oid, 0
    FROM pg_catalog.pg_namespace n
    WHERE %(schema)s::pg_catalog.bool
      AND n.oid OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
    UNION ALL
    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid, 0
    FROM pg_catalog.pg_proc p
    WHERE %(schema)s::pg_catalog.bool
      AND p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(
              'jobctl.refuse(pg_catalog.text, pg_catalog.text)')::pg_catalog.oid
    UNION ALL
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, c.oid, 0
    FROM pg_catalog.pg_class c
    WHERE %(schema)s::pg_catalog.bool
      AND c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
      AND c.relkind OPERATOR(pg_catalog.=) ANY(ARRAY['r', 'p']::pg_catalog."char"[])
),
dropped (classid, objid, objsubid) AS (
    SELECT classid, objid, objsubid FROM target
    UNION
    SELECT d.classid, d.objid, d.objsubid
    FROM pg_catalog.pg_depend d
    JOIN dropped t ON d.refclassid OPERATOR(pg_catalog.=) t.classid
                  AND d.refobjid OPERATOR(pg_catalog.=) t.objid
                  AND (t.objsubid OPERATOR(pg_catalog.=) 0
                       OR d.refobjsubid OPERATOR(pg_catalog.=) t.objsubid)
    WHERE d.deptype OPERATOR(pg_catalog.=) ANY(ARRAY['a', 'i', 'P', 'S']::pg_catalog."char"[])
),
refusing AS (
    SELECT DISTINCT d.classid, d.objid, d.objsubid,
           t.classid AS on_classid, t.objid AS on_objid, t.objsubid AS on_objsubid
    FROM dropped t
    JOIN pg_catalog.pg_depend d ON d.refclassid OPERATOR(pg_catalog.=) t.classid
                               AND d.refobjid OPERATOR(pg_catalog.=) t.objid
                               AND (t.objsubid OPERATOR(pg_catalog.=) 0
                                    OR d.refobjsubid OPERATOR(pg_catalog.=) t.objsubid)
    WHERE d.deptype OPERATOR(pg_catalog.=) 'n'::pg_catalog."char"
      AND NOT EXISTS (SELECT FROM dropped o
                      WHERE o.classid OPERATOR(pg_catalog.=) d.classid
                        AND o.objid OPERATOR(pg_catalog.=) d.objid
                        AND (o.objsubid OPERATOR(pg_catalog.=) 0
                             OR o.objsubid OPERATOR(pg_catalog.=) d.objsubid))
)
SELECT o.type AS kind, o.identity AS name,
       pg_catalog.array_agg(DISTINCT (r.type OPERATOR(pg_catalog.||) ' '::pg_catalog.text
                                      OPERATOR(pg_catalog.||) r.identity)) AS depends_on
FROM refusing f
LEFT JOIN pg_catalog.pg_rewrite w
       ON f.classid
          OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass::pg_catalog.oid
      AND w.oid OPERATOR(pg_catalog.=) f.objid
      AND w.rulename OPERATOR(pg_catalog.=) '_RETURN'::pg_catalog.name
LEFT JOIN pg_catalog.pg_attrdef ad
       ON f.classid
          OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass::pg_catalog.oid
      AND ad.oid OPERATOR(pg_catalog.=) f.objid
CROSS JOIN LATERAL pg_catalog.pg_identify_object(
    CASE WHEN w.oid IS NULL AND ad.oid IS NULL THEN f.classid
         ELSE 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid END,
    COALESCE(w.ev_class, ad.adrelid, f.objid),
    CASE WHEN w.oid IS NOT NULL THEN 0
         WHEN ad.oid IS NOT NULL THEN ad.adnum::pg_catalog.int4
         ELSE f.objsubid END) o
CROSS JOIN LATERAL pg_catalog.pg_identify_object(f.on_classid, f.on_objid, f.on_objsubid) r
GROUP BY o.type, o.identity
ORDER BY o.identity, o.type
