-- jobctl doctor's reads (ops/doctor.py): the statistics of the statements the application
-- runs (pg_stat_statements, in the schema it is installed in: {schema}) and the history's
-- evidence for the lease design's four checks. Read only, in one read-only transaction.

-- name: doctor_statistics_schema
-- where pg_stat_statements is installed in this database (NULL: it is not)
SELECT (SELECT n.nspname FROM pg_catalog.pg_extension e
        JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_stat_statements') AS schema

-- name: doctor_statistics
-- the statements the statistics hold for this database whose text names the jobs table
-- (the parser judges each; text kept from this role counted apart), with their role
SELECT s.queryid, s.query, r.rolname AS role, s.calls, s.rows
FROM {schema}.pg_stat_statements s
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database())
  AND (s.query IS NULL OR s.query = '<insufficient privilege>'
       OR pg_catalog.strpos(pg_catalog.lower(s.query), pg_catalog.lower(%(relname)s)) > 0)

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
  AND e.event IN ('requeued', 'manually_failed', 'policy_changed', 'quarantined')
