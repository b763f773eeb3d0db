-- jobctl doctor's reads (ops/doctor.py): the statistics of the statements the application
-- runs (pg_stat_statements, in the schema it is installed in: {schema}) and the history's
-- evidence for the lease design's four checks. Read only, in one read-only transaction.

-- name: doctor_statistics_schema
-- where pg_stat_statements is installed in this database (NULL: it is not)
SELECT (SELECT n.nspname FROM pg_catalog.pg_extension e
        JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_stat_statements') AS schema

-- name: doctor_statistics
-- the statements the statistics hold for this database that may write (a write's keyword
-- cannot be spelled another way, unlike the table's name: quoted, unicode-escaped, a view or a
-- partition; the parser judges each), with their role; text kept from this role counted
-- apart. Each text is cut here, on the server, to its first %(chars)s characters, its whole
-- length beside it: an application's statement can be any size, and doctor's memory may not
SELECT s.queryid, pg_catalog.left(s.query, %(chars)s) AS query,
       pg_catalog.length(s.query) AS query_chars, r.rolname AS role, s.calls, s.rows
FROM {schema}.pg_stat_statements s
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database())
  AND (s.query IS NULL OR s.query = '<insufficient privilege>'
       OR pg_catalog.texticregexeq(s.query, '\m(update|delete|insert|merge|truncate)\M'))

-- name: doctor_table_relations
-- the relations a write reaches the jobs table through, besides its own name: its partitions
-- and inheritance children, and the views (and views of those) whose rules read it, at any
-- depth; each with its schema, as a statement may name it
WITH RECURSIVE edges(parent, child) AS (
    SELECT i.inhparent, i.inhrelid FROM pg_catalog.pg_inherits i
    UNION ALL
    SELECT d.refobjid, w.ev_class
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_rewrite w ON w.oid = d.objid
    WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
      AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
      AND w.ev_class OPERATOR(pg_catalog.<>) d.refobjid
), related(oid) AS (
    SELECT %(oid)s::pg_catalog.oid
    UNION
    SELECT e.child FROM edges e JOIN related r ON e.parent OPERATOR(pg_catalog.=) r.oid
)
SELECT n.nspname AS schema, c.relname AS name, c.oid AS oid,
       c.relkind OPERATOR(pg_catalog.=) 'v' AS view
FROM related r
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.oid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE r.oid OPERATOR(pg_catalog.<>) %(oid)s::pg_catalog.oid
LIMIT 10000

-- name: doctor_views
-- the views among those relations (%(oids)s), each with its definition as the server prints
-- it (cut at %(chars)s characters) and its columns in order: doctor maps each column to the
-- table's column it shows, and judges a write through the view on the table's columns
SELECT n.nspname AS schema, c.relname AS name,
       pg_catalog.left(pg_catalog.pg_get_viewdef(c.oid), %(chars)s) AS definition,
       ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum > 0
               AND NOT a.attisdropped
             ORDER BY a.attnum) AS columns
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.oid OPERATOR(pg_catalog.=) ANY (%(oids)s::pg_catalog.oid[])
  AND c.relkind OPERATOR(pg_catalog.=) 'v'
ORDER BY 1, 2
LIMIT 10000

-- name: doctor_rules
-- the rules (other than a view's own SELECT, _RETURN) on any relation whose actions name the
-- jobs table or a relation that reaches it (%(oids)s): what they write never reaches
-- pg_stat_statements as itself (the statement that fired them does). Each with its
-- definition as the server prints it, cut at %(chars)s characters, and its whole length
SELECT n.nspname AS schema, c.relname AS relation, w.rulename AS name,
       pg_catalog.left(pg_catalog.pg_get_ruledef(w.oid), %(chars)s) AS definition,
       pg_catalog.length(pg_catalog.pg_get_ruledef(w.oid)) AS chars
FROM pg_catalog.pg_rewrite w
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) w.ev_class
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE w.rulename OPERATOR(pg_catalog.<>) '_RETURN'
  AND EXISTS (SELECT FROM pg_catalog.pg_depend d
              WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                AND d.objid OPERATOR(pg_catalog.=) w.oid
                AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                AND d.refobjid OPERATOR(pg_catalog.=) ANY (%(oids)s::pg_catalog.oid[]))
ORDER BY 1, 2, 3
LIMIT 1000

-- name: doctor_triggers
-- every trigger the application made on any relation (not a constraint's, not a partition's
-- clone of its parent's), with its function's language and definition as the server prints
-- it (cut at %(chars)s characters, its whole length beside it): the statements of a trigger
-- are in pg_stat_statements only with track = 'all'. Read, never run
SELECT n.nspname AS schema, c.relname AS relation, t.tgname AS name,
       pn.nspname OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) p.proname AS function,
       l.lanname AS language,
       pg_catalog.left(pg_catalog.pg_get_functiondef(p.oid), %(chars)s) AS definition,
       pg_catalog.length(pg_catalog.pg_get_functiondef(p.oid)) AS chars
FROM pg_catalog.pg_trigger t
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
JOIN pg_catalog.pg_namespace pn ON pn.oid OPERATOR(pg_catalog.=) p.pronamespace
JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang
WHERE NOT t.tgisinternal AND t.tgparentid OPERATOR(pg_catalog.=) 0
ORDER BY 1, 2, 3
LIMIT 1000

-- name: doctor_equal_shadows
-- the schemas other than pg_catalog that define an operator = between uuids: on a search path
-- that lists them before pg_catalog, an unqualified = on the fence is theirs
SELECT DISTINCT n.nspname AS schema
FROM pg_catalog.pg_operator o
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace
WHERE o.oprname OPERATOR(pg_catalog.=) '='
  AND o.oprleft OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype
  AND o.oprright OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype
  AND n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'
ORDER BY 1
LIMIT 100

-- name: doctor_table_columns
-- every column of the jobs table (a name outside them in a statement is a function's variable),
-- and whether it holds a time (a date/time type, or a domain over one: typcategory D), which a
-- sweeper may pick rows by the age of
SELECT a.attname AS name, t.typcategory OPERATOR(pg_catalog.=) 'D' AS is_time
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
WHERE a.attrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
  AND a.attnum > 0 AND NOT a.attisdropped

-- name: doctor_statistics_reset
-- when the statistics' window started (pg_stat_statements_info, PostgreSQL 14+)
SELECT stats_reset FROM {schema}.pg_stat_statements_info

-- name: doctor_history_installed
-- whether the history's tables exist (schema apply installs them)
SELECT pg_catalog.to_regclass('jobctl.attempts') IS NOT NULL
       AND pg_catalog.to_regclass('jobctl.events') IS NOT NULL AS installed

-- name: doctor_lease_history
-- per worker, the attempts the history holds in the window: the typical lease, the p99 of
-- each attempt's largest heartbeat gap (where the history counts heartbeats: late, exact),
-- attempts that ended after their lease ran out without a reclaim (outlived it), reclaims,
-- and reclaims of attempts whose worker had heartbeat within two leases of the reclaim (still
-- alive, most likely: the lease is too short for its heartbeats, or the worker stalled)
SELECT a.worker, count(*) AS attempts,
       extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY a.lease))::float8
           AS lease_s,
       extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY a.max_heartbeat_gap))
           ::float8 AS p99_gap_s,
       count(*) FILTER (WHERE a.ended_at > a.lease_expires_at AND a.outcome <> 'reclaimed')
           AS outlived,
       count(*) FILTER (WHERE a.outcome = 'reclaimed') AS reclaimed,
       count(*) FILTER (WHERE a.outcome = 'reclaimed'
                          AND a.last_heartbeat_at > a.ended_at - 2 * a.lease)
           AS reclaimed_while_beating,
       string_agg(DISTINCT a.heartbeat_stats, ',') AS heartbeat_stats
FROM jobctl.attempts a
WHERE a.job_table = %(job_table)s AND a.claimed_at > now() - %(window)s::interval
GROUP BY a.worker
ORDER BY a.worker
LIMIT 100

-- name: doctor_auto_reruns
-- auto-policy jobs reclaim gave back to the queue in the window: each runs again
SELECT count(*) AS reclaims, count(DISTINCT e.job_id) AS jobs, max(e.at) AS last_at
FROM jobctl.events e
WHERE e.job_table = %(job_table)s AND e.event = 'reclaimed'
  AND e.to_status = %(queued)s AND e.at > now() - %(window)s::interval

-- name: doctor_last_human_action
-- when a person last acted on the jobs (a requeue, a fail, a policy change by hand)
SELECT max(e.at) AS at, (array_agg(e.actor ORDER BY e.at DESC))[1] AS actor
FROM jobctl.events e
WHERE e.job_table = %(job_table)s
  AND e.event IN ('requeued', 'manually_failed', 'cancelled', 'policy_changed', 'quarantined')
