-- jobctl: concurrently
-- The claims of a paused kind or queue since the pause, found from jobctl's own record of
-- attempts by an index instead of a scan of jobctl.attempts.
--
-- While something is paused, every view (pause --list, summary, stuck, metrics, report, top)
-- counts the attempts the history recorded as claimed at or after the pause (the block
-- claims_recorded_since_pause of sql/queries.sql: job_table = the table, claimed_at >=
-- paused_at). Without an index that read the whole history's attempts, every minute from
-- metrics' timer (500 ms at 2 M attempts). This index finds the attempts claimed since the
-- pause; each one's job is then read by its primary key, as before. claimed_at grows with
-- time, so an attempt's row (written once, when it ends) lands at the index's right edge.
--
-- Built CONCURRENTLY, outside a transaction (the header line above; schema apply records the
-- migration in a transaction of its own once the index is built): its lock, SHARE UPDATE
-- EXCLUSIVE, lets the workers' statements that end an attempt (the trigger inserts its row)
-- go on during the build. An invalid index left by an interrupted build is dropped and built
-- again by the next schema apply.
CREATE INDEX CONCURRENTLY IF NOT EXISTS attempts_claimed_idx
    ON jobctl.attempts (job_table, claimed_at);
