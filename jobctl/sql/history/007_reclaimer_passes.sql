-- The reclaimer's heartbeat: each `reclaim --every` records every pass it finishes,
-- one row per reclaimer of a table, so that metrics (jobctl_reclaimer_last_pass_timestamp_seconds,
-- jobctl_reclaimer_passes_total) and summary can tell when no reclaimer has run: a sweeper that
-- stopped is seen by its silence here, not by the stuck jobs piling up later.
--
-- who: `reclaimer` (the service's actor, JOBCTL_ACTOR: e.g. reclaimer@host), its role and pid;
-- where: the host; when: started_at, last_pass_at (the database's clock); what it did: the last
-- pass's requeued and parked jobs, the totals since started_at, its interval (--every), and
-- how its notifications fared.
CREATE TABLE jobctl.reclaimer_passes (
    job_table       text NOT NULL,           -- format('%I.%I', schema, name), as the history
    reclaimer       text NOT NULL,           -- the service's actor
    host            text NOT NULL,
    pid             integer NOT NULL,
    db_role         text NOT NULL DEFAULT current_user,
    every_s         double precision NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    last_pass_at    timestamptz NOT NULL DEFAULT now(),
    passes          bigint NOT NULL DEFAULT 1,
    last_requeued   integer NOT NULL DEFAULT 0,
    last_parked     integer NOT NULL DEFAULT 0,
    requeued_total  bigint NOT NULL DEFAULT 0,
    parked_total    bigint NOT NULL DEFAULT 0,
    notices_sent    bigint NOT NULL DEFAULT 0,  -- its notifications (--notify) since started_at:
    notices_failed  bigint NOT NULL DEFAULT 0,  -- delivered, and failed or dropped
    PRIMARY KEY (job_table, reclaimer)
);

-- Whoever reads the history reads this too (schema grants --read gives the rest; the roles
-- granted before this version get it here); the reclaimer's role writes its row (schema
-- grants --operator grants INSERT and UPDATE).
GRANT SELECT ON jobctl.reclaimer_passes TO PUBLIC;
