-- jobctl: baseline 015
-- The history's schema as its migrations 001-015 leave it, made at once: what a fresh install
-- runs (schema apply on a database without schema jobctl), in one transaction, with a row of
-- jobctl.migrations for each migration it stands for (this jobctl's version and the sha256 of
-- each one's file, as the migrations' own records hold them). The migrations run only to
-- upgrade a database installed before; one numbered above the header's line runs after this.
-- tests/integration/test_baseline.py checks that a fresh install and one upgraded from every
-- earlier history version have the same catalog: a new migration changes this file too.
--
-- The events of the jobs tables' history (transitions but claims and completions, jobctl's
-- own writes with actor and reason), written by each table's trigger function. Job ids are
-- the id's canonical text; COLLATE "C": compared for equality only, the cheapest to index.
CREATE TABLE jobctl.events (
    event_id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_table     text        NOT NULL,  -- format('%I.%I', schema, name)
    job_id        text        COLLATE "C" NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    event         text        NOT NULL,
    from_status   text,
    to_status     text,
    attempt       integer,
    attempt_token uuid,
    worker        text,
    actor         text,
    reason        text,
    db_role       text,   -- the database role that made the change
    claimed       jsonb,  -- what a role that is not jobctl's declared (actor, action, reason)
    worker_bytes  bigint, -- a kept text's whole length, when the history cut it at 4096
    reason_bytes  bigint
);
CREATE INDEX events_job_idx ON jobctl.events (job_table, job_id, event_id);
CREATE INDEX events_at_idx ON jobctl.events (at);
-- the jobs awaiting review start from the history's reclaims (008)
CREATE INDEX events_reclaimed_idx ON jobctl.events (job_table, to_status, job_id) INCLUDE (at)
    WHERE event OPERATOR(pg_catalog.=) 'reclaimed';

-- one row per attempt that ended, written once (no unique index on a random uuid)
CREATE TABLE jobctl.attempts (
    attempt_token     uuid        NOT NULL,
    job_table         text        NOT NULL,
    job_id            text        COLLATE "C" NOT NULL,
    attempt           integer,
    worker            text,
    claimed_at        timestamptz NOT NULL,
    heartbeats        integer     NOT NULL DEFAULT 0,
    last_heartbeat_at timestamptz,
    max_heartbeat_gap interval,
    ended_at          timestamptz,
    outcome           text,
    lease             interval,
    lease_expires_at  timestamptz,
    heartbeat_stats   text,  -- late, exact, none
    ended_by          text,  -- the database role that ended the attempt
    worker_bytes      bigint
) WITH (fillfactor = 100);
CREATE INDEX attempts_job_idx ON jobctl.attempts (job_table, job_id);
-- the claims of a paused kind or queue since the pause (014)
CREATE INDEX attempts_claimed_idx ON jobctl.attempts (job_table, claimed_at);

-- which migrations made this schema: by which jobctl, and the sha256 of each one's text
CREATE TABLE jobctl.migrations (
    version        integer     PRIMARY KEY,
    name           text        NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT now(),
    jobctl_version text,
    checksum       text
);

-- each jobs table's own names for the lease design's columns and statuses
CREATE TABLE jobctl.tables (
    job_table  text PRIMARY KEY,
    mapping    jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT session_user
);

-- a recovery policy per kind or queue (jobctl policy), and every change of one
CREATE TABLE jobctl.kind_policies (
    job_table  text        NOT NULL,
    dimension  text        NOT NULL CHECK (dimension IN ('kind', 'queue')),
    value      text        NOT NULL,
    policy     text        NOT NULL CHECK (policy IN ('auto', 'manual')),
    reason     text,
    actor      text,
    db_role    text        NOT NULL DEFAULT session_user,
    set_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_table, dimension, value)
);
CREATE TABLE jobctl.kind_policy_events (
    event_id   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    job_table  text        NOT NULL,
    dimension  text        NOT NULL,
    value      text        NOT NULL,
    policy     text,
    reason     text,
    actor      text,
    db_role    text        NOT NULL DEFAULT session_user
);

-- the reclaimer service's passes (reclaim --every), one row per reclaimer of a table
CREATE TABLE jobctl.reclaimer_passes (
    job_table       text NOT NULL,
    reclaimer       text NOT NULL,
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
    notices_sent    bigint NOT NULL DEFAULT 0,
    notices_failed  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (job_table, reclaimer)
);

-- the kinds and queues whose claim is paused (jobctl pause), and every pause and resume
CREATE TABLE jobctl.pauses (
    job_table  text        NOT NULL,
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
CREATE INDEX pause_events_at_idx ON jobctl.pause_events (job_table, at);

-- reclaim_batch's refusal of a row an application's trigger kept back or changed (013)
CREATE FUNCTION jobctl.refuse(message pg_catalog.text, detail pg_catalog.text)
RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $$BEGIN RAISE EXCEPTION USING ERRCODE = 'JC001', MESSAGE = $1, DETAIL = $2; END$$;
COMMENT ON FUNCTION jobctl.refuse(pg_catalog.text, pg_catalog.text) IS
    'jobctl: reclaim_batch''s refusal of a row not written as meant (SQLSTATE JC001); history 013';

-- every role reads the mappings, policies, passes and pauses (the workers' claim reads
-- jobctl.pauses); the history itself only the roles schema grants names
GRANT USAGE ON SCHEMA jobctl TO PUBLIC;
GRANT SELECT ON jobctl.tables, jobctl.kind_policies, jobctl.kind_policy_events,
    jobctl.reclaimer_passes, jobctl.pauses, jobctl.pause_events TO PUBLIC;
GRANT EXECUTE ON FUNCTION jobctl.refuse(pg_catalog.text, pg_catalog.text) TO PUBLIC;
