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
-- the index alone.
--
-- Built in the migration's transaction (not CONCURRENTLY: a migration is one transaction with
-- its record): it holds a SHARE lock on jobctl.events for the build, during which the
-- statements that insert events (a worker's failure or retry, jobctl's writes) wait; claims,
-- heartbeats and completions do not. Measured in docs/reference/performance.md
-- ("Awaiting review without a scan").
CREATE INDEX IF NOT EXISTS events_reclaimed_idx
    ON jobctl.events (job_table, to_status, job_id) INCLUDE (at)
    WHERE event = 'reclaimed';
