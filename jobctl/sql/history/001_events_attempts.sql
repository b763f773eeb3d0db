-- jobctl's history: an append-only event log and one row per attempt (the heartbeat history),
-- filled by a trigger on the jobs table so that workers in any language are recorded.
CREATE SCHEMA IF NOT EXISTS jobctl;

CREATE TABLE IF NOT EXISTS jobctl.events (
    event_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_table     text        NOT NULL,
    job_id        bigint      NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    event         text        NOT NULL,
    from_status   text,
    to_status     text,
    attempt       integer,
    attempt_token uuid,
    worker        text,
    actor         text,
    reason        text
);
CREATE INDEX IF NOT EXISTS events_job_idx ON jobctl.events (job_table, job_id, event_id);
CREATE INDEX IF NOT EXISTS events_at_idx ON jobctl.events (at);

CREATE TABLE IF NOT EXISTS jobctl.attempts (
    attempt_token     uuid PRIMARY KEY,
    job_table         text        NOT NULL,
    job_id            bigint      NOT NULL,
    attempt           integer,
    worker            text,
    claimed_at        timestamptz NOT NULL,
    heartbeats        integer     NOT NULL DEFAULT 0,
    last_heartbeat_at timestamptz,
    max_heartbeat_gap interval,
    ended_at          timestamptz,
    outcome           text,
    lease             interval,
    lease_expires_at  timestamptz
) WITH (fillfactor = 70);
-- the lease length and expiry of each attempt, for jobctl explain (added in 0.1)
ALTER TABLE jobctl.attempts ADD COLUMN IF NOT EXISTS lease interval,
                            ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz;
CREATE INDEX IF NOT EXISTS attempts_job_idx ON jobctl.attempts (job_table, job_id);

-- SECURITY DEFINER: workers and operators need no privilege on jobctl's tables, and cannot
-- write the audit trail except through real transitions of the jobs table.
CREATE OR REPLACE FUNCTION jobctl.record_transition() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
DECLARE
    job_table text;
    operator_action text;
    actor text;
    reason text;
    kind text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status = 'processing' AND OLD.status = 'processing'
       AND NEW.attempt_token = OLD.attempt_token
       AND NEW.heartbeat_at IS DISTINCT FROM OLD.heartbeat_at THEN
        -- the workers' hot path, a heartbeat: one update of the attempt, nothing else computed
        UPDATE jobctl.attempts a
        SET heartbeats = a.heartbeats + 1,
            last_heartbeat_at = NEW.heartbeat_at,
            lease = NEW.lease_expires_at - NEW.heartbeat_at,
            lease_expires_at = NEW.lease_expires_at,
            max_heartbeat_gap = greatest(a.max_heartbeat_gap,
                NEW.heartbeat_at - coalesce(OLD.heartbeat_at, a.claimed_at))
        WHERE a.attempt_token = NEW.attempt_token;
        RETURN NULL;
    END IF;
    job_table := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    operator_action := nullif(current_setting('jobctl.action', true), '');
    actor := coalesce(nullif(current_setting('jobctl.actor', true), ''), session_user);
    reason := nullif(current_setting('jobctl.reason', true), '');
    IF TG_OP = 'UPDATE' THEN
        IF NEW.status = OLD.status AND NEW.attempt_token IS NOT DISTINCT FROM OLD.attempt_token THEN
            -- same attempt, not a heartbeat: an operator's change such as a policy switch
            IF operator_action IS NOT NULL THEN
                INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,
                                           attempt, attempt_token, worker, actor, reason)
                VALUES (job_table, NEW.id, operator_action, OLD.status, NEW.status,
                        OLD.attempts, OLD.attempt_token, OLD.reserved_by, actor, reason);
            END IF;
            RETURN NULL;
        END IF;

        -- a transition: say what it was and close the attempt it ended
        kind := CASE
            WHEN operator_action = 'requeue' THEN 'requeued'
            WHEN operator_action = 'fail' THEN 'manually_failed'
            WHEN operator_action IS NOT NULL THEN operator_action
            WHEN NEW.reclaim_count > OLD.reclaim_count THEN 'reclaimed'
            WHEN OLD.status = 'processing' AND NEW.status = 'done' THEN 'completed'
            WHEN OLD.status = 'processing' AND NEW.status = 'failed' THEN 'failed'
            WHEN OLD.status = 'processing' AND NEW.status = 'queued' THEN 'retried'
            WHEN OLD.status = 'processing' THEN 'superseded'
            WHEN NEW.status = 'processing' THEN NULL
            ELSE 'status_changed'
        END;
        IF OLD.attempt_token IS NOT NULL THEN
            UPDATE jobctl.attempts SET ended_at = now(), outcome = kind
            WHERE attempt_token = OLD.attempt_token;
        END IF;
        IF kind IS NOT NULL THEN
            INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,
                                       attempt, attempt_token, worker, actor, reason)
            VALUES (job_table, NEW.id, kind, OLD.status, NEW.status,
                    OLD.attempts, OLD.attempt_token, OLD.reserved_by, actor,
                    CASE WHEN operator_action IS NOT NULL THEN reason ELSE NEW.last_error END);
        END IF;
    END IF;

    IF NEW.status = 'processing' AND NEW.attempt_token IS NOT NULL THEN
        INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, attempt, worker, claimed_at,
                                     lease, lease_expires_at)
        VALUES (NEW.attempt_token, job_table, NEW.id, NEW.attempts, NEW.reserved_by,
                coalesce(NEW.reserved_at, now()),
                NEW.lease_expires_at - coalesce(NEW.reserved_at, now()), NEW.lease_expires_at)
        ON CONFLICT (attempt_token) DO NOTHING;
        INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,
                                   attempt, attempt_token, worker, actor)
        VALUES (job_table, NEW.id, 'claimed', OLD.status, NEW.status,
                NEW.attempts, NEW.attempt_token, NEW.reserved_by, actor);
    END IF;
    RETURN NULL;
END
$function$;
