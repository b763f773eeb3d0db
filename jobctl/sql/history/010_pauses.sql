-- A pause per kind or queue of a jobs table: jobctl pause --kind K --reason TEXT stops the
-- claim of every queued job of kind K (the claim jobctl gives workers: lease.Worker, the
-- rendered statements of jobctl schema statements, the demo's workers) until jobctl resume.
-- Nothing about a job's row changes: its jobs stay queued and wait, unclaimed. One row per
-- table, dimension (kind, queue) and value while paused; every pause and resume beside it,
-- with who made it (actor, database role) and why.
--
-- Written by jobctl schema's owner only (as jobctl.kind_policies: it steers every worker of
-- the table); read by every role (GRANT ... TO PUBLIC), the workers' too: their claim reads
-- jobctl.pauses (the block job_paused), by its primary key.
CREATE TABLE jobctl.pauses (
    job_table  text        NOT NULL,  -- format('%I.%I', schema, name), as the history records it
    dimension  text        NOT NULL CHECK (dimension IN ('kind', 'queue')),
    value      text        NOT NULL,
    reason     text        NOT NULL,
    actor      text,
    db_role    text        NOT NULL DEFAULT session_user,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_table, dimension, value)
);

CREATE TABLE jobctl.pause_events (
    event_id   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    job_table  text        NOT NULL,
    dimension  text        NOT NULL,
    value      text        NOT NULL,
    event      text        NOT NULL CHECK (event IN ('paused', 'resumed')),
    reason     text,
    actor      text,
    db_role    text        NOT NULL DEFAULT session_user
);
-- jobctl events reads them beside the history's events, in the time order of its window
CREATE INDEX pause_events_at_idx ON jobctl.pause_events (job_table, at);

GRANT SELECT ON jobctl.pauses, jobctl.pause_events TO PUBLIC;
