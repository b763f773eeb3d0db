-- jobctl: concurrently
-- The jobs awaiting review, found from jobctl's own record instead of a scan of the jobs table.
--
-- A job awaits a human when a reclaim parked it and nobody acted since (the block
-- awaiting_review of sql/queries.sql). Every read of it (review, summary, metrics, report, top,
-- doctor) filtered the whole jobs table to find those few rows, every minute from metrics'
-- timer. They now start from the history's reclaims of the table that
-- moved a job to the park status (the block review_candidates), found by this index, and
-- look each job up by its primary key; awaiting_review still decides.
--
-- Partial (event = 'reclaimed'): the index holds one entry per reclaim, not per event, and a
-- worker's failure or retry that inserts an event only evaluates its predicate. `at` rides
-- along (INCLUDE) so that metrics' count of the window's reclaims (metrics_reclaims) reads
-- the index alone. Measured in docs/reference/performance.md ("Awaiting review without a
-- scan").
--
-- Built CONCURRENTLY, outside a transaction (the header line above; schema apply records the
-- migration in a transaction of its own once the index is built): its lock, SHARE UPDATE
-- EXCLUSIVE, lets the statements that insert events (a worker's failure or retry, jobctl's
-- writes) go on during the build, which waits for the transactions already running. An
-- invalid index left by an interrupted build is dropped and built again by the next schema
-- apply. (Until 0.2.0 it was built in the migration's transaction, under a SHARE lock those
-- statements waited for: seconds at millions of events.) The operator is named with its
-- schema: the build runs under the session's search_path.
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_reclaimed_idx
    ON jobctl.events (job_table, to_status, job_id) INCLUDE (at)
    WHERE event OPERATOR(pg_catalog.=) 'reclaimed';
