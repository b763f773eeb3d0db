-- The history at a few per cent of the workers' cycles, and jobctl's own audit.
--
-- One BEFORE UPDATE trigger per jobs table (installed by schema apply, see schema.py) calls
-- jobctl.record_change() only for non-routine statements: its WHEN lets through transitions
-- (status no longer processing, a new token), jobctl's own writes (jobctl_action set) and, in
-- the late mode, late heartbeats (more than half a lease after the previous one). Claims and
-- on-time heartbeats never call plpgsql. The live attempt is read from the jobs row itself;
-- its heartbeat statistics are kept in extra columns of that row (jobctl_attempt,
-- jobctl_heartbeats, jobctl_max_gap, jobctl_lease), written by the trigger into NEW (no
-- extra tuple). An attempt is written to jobctl.attempts once, when it ends; events are
-- stored only for transitions other than claims and completions (those are derived from
-- the attempts).
--
-- The trigger's argument says what it records: 'late' (heartbeats are counted only when
-- late; a first install now gets 'transitions', schema apply --history), 'exact' (every heartbeat calls the trigger: exact counts and gaps, at a
-- measured cost) or 'audit' (only jobctl's own writes: schema apply --no-worker-history).

ALTER TABLE jobctl.attempts
    ADD COLUMN heartbeat_stats text,   -- late, exact, none; NULL: version 1 counted them all
    ADD COLUMN ended_by text,          -- the database role that ended the attempt
    -- written once per attempt now: no unique index to maintain on a random uuid (an attempt
    -- that began under version 1 ends with a second row, which jobctl history merges)
    DROP CONSTRAINT attempts_pkey;
ALTER TABLE jobctl.attempts SET (fillfactor = 100);
ALTER TABLE jobctl.events
    ADD COLUMN db_role text;           -- the database role that made the change (not declared)

CREATE FUNCTION jobctl.record_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
DECLARE
    action text;
    kind text;
    gap interval;
BEGIN
    -- The workers' cases first, in as few expressions as possible: plpgsql prepares every
    -- expression afresh in each transaction, and workers autocommit.
    IF NEW.jobctl_action IS NULL THEN
        IF NEW.status = 'done' AND OLD.status = 'processing' AND OLD.attempt_token IS NOT NULL THEN
            -- a completion: the attempt's one row
            INSERT INTO jobctl.attempts (
                attempt_token, job_table, job_id, attempt, worker, claimed_at, heartbeats,
                last_heartbeat_at, max_heartbeat_gap, ended_at, outcome, lease,
                lease_expires_at, heartbeat_stats, ended_by)
            VALUES (
                OLD.attempt_token, format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), OLD.id,
                OLD.attempts, OLD.reserved_by, coalesce(OLD.reserved_at, now()),
                CASE WHEN OLD.jobctl_attempt = OLD.attempt_token
                     THEN coalesce(OLD.jobctl_heartbeats, 0) ELSE 0 END,
                OLD.heartbeat_at,
                CASE WHEN OLD.jobctl_attempt = OLD.attempt_token THEN OLD.jobctl_max_gap END,
                now(), 'completed',
                coalesce(CASE WHEN OLD.jobctl_attempt = OLD.attempt_token THEN OLD.jobctl_lease END,
                         OLD.lease_expires_at - coalesce(OLD.heartbeat_at, OLD.reserved_at)),
                OLD.lease_expires_at, TG_ARGV[0], session_user);
            IF OLD.jobctl_attempt IS NOT NULL THEN
                NEW.jobctl_attempt := NULL;
                NEW.jobctl_heartbeats := NULL;
                NEW.jobctl_max_gap := NULL;
                NEW.jobctl_lease := NULL;
            END IF;
            RETURN NEW;
        ELSIF NEW.status = 'processing' AND NEW.attempt_token = OLD.attempt_token THEN
            -- a heartbeat the WHEN let through: a late one (any one in 'exact' mode)
            IF NEW.heartbeat_at IS DISTINCT FROM OLD.heartbeat_at THEN
                gap := NEW.heartbeat_at - coalesce(OLD.heartbeat_at, OLD.reserved_at);
                IF NEW.jobctl_attempt = NEW.attempt_token THEN
                    NEW.jobctl_heartbeats := coalesce(NEW.jobctl_heartbeats, 0) + 1;
                    NEW.jobctl_max_gap := greatest(NEW.jobctl_max_gap, gap);
                ELSE
                    NEW.jobctl_attempt := NEW.attempt_token;
                    NEW.jobctl_heartbeats := 1;
                    NEW.jobctl_max_gap := gap;
                END IF;
                NEW.jobctl_lease := NEW.lease_expires_at - NEW.heartbeat_at;
            END IF;
            RETURN NEW;
        END IF;
    END IF;

    -- jobctl_action marks jobctl's own write; it is consumed here and never stored. A value
    -- equal to OLD's was left by a write made while the trigger was disabled: not this one's.
    action := NEW.jobctl_action;
    NEW.jobctl_action := NULL;
    IF action IS NOT DISTINCT FROM OLD.jobctl_action THEN
        action := NULL;
    END IF;

    IF NEW.status = OLD.status AND NEW.attempt_token IS NOT DISTINCT FROM OLD.attempt_token THEN
        IF action IS NOT NULL THEN
            -- the same attempt: only a recovery policy switch is an action of this kind
            IF action NOT IN ('quarantined', 'policy_changed')
               OR NEW.recovery_policy IS NOT DISTINCT FROM OLD.recovery_policy THEN
                RAISE EXCEPTION 'jobctl: % does not describe this change of job %', action, NEW.id;
            END IF;
            INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,
                                       attempt, attempt_token, worker, actor, reason, db_role)
            VALUES (format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), NEW.id, action,
                    OLD.status, NEW.status, OLD.attempts, OLD.attempt_token, OLD.reserved_by,
                    coalesce(nullif(current_setting('jobctl.actor', true), ''), session_user),
                    nullif(current_setting('jobctl.reason', true), ''), session_user);
        END IF;
        RETURN NEW;
    END IF;

    -- a transition: what it was
    kind := CASE
        WHEN action = 'reclaimed' AND OLD.status = 'processing'
             AND NEW.reclaim_count > OLD.reclaim_count THEN action
        WHEN action = 'requeued' AND NEW.status = 'queued' THEN action
        WHEN action = 'manually_failed' AND NEW.status = 'failed' THEN action
        WHEN action IS NOT NULL THEN NULL
        WHEN NEW.reclaim_count > OLD.reclaim_count THEN 'reclaimed'
        WHEN OLD.status = 'processing' AND NEW.status = 'done' THEN 'completed'
        WHEN OLD.status = 'processing' AND NEW.status = 'failed' THEN 'failed'
        WHEN OLD.status = 'processing' AND NEW.status = 'queued' THEN 'retried'
        WHEN OLD.status = 'processing' THEN 'superseded'
        WHEN NEW.status = 'processing' THEN 'claimed'
        ELSE 'status_changed'
    END;
    IF kind IS NULL THEN
        RAISE EXCEPTION 'jobctl: % does not describe this change of job % (% -> %)',
            action, NEW.id, OLD.status, NEW.status;
    END IF;

    IF TG_ARGV[0] <> 'audit' AND OLD.attempt_token IS NOT NULL THEN
        -- the attempt ended: its one row, with the statistics the jobs row kept
        INSERT INTO jobctl.attempts (
            attempt_token, job_table, job_id, attempt, worker, claimed_at, heartbeats,
            last_heartbeat_at, max_heartbeat_gap, ended_at, outcome, lease, lease_expires_at,
            heartbeat_stats, ended_by)
        VALUES (
            OLD.attempt_token, format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), OLD.id,
            OLD.attempts, OLD.reserved_by, coalesce(OLD.reserved_at, now()),
            CASE WHEN OLD.jobctl_attempt = OLD.attempt_token
                 THEN coalesce(OLD.jobctl_heartbeats, 0) ELSE 0 END,
            OLD.heartbeat_at,
            CASE WHEN OLD.jobctl_attempt = OLD.attempt_token THEN OLD.jobctl_max_gap END,
            now(), kind,
            coalesce(CASE WHEN OLD.jobctl_attempt = OLD.attempt_token THEN OLD.jobctl_lease END,
                     OLD.lease_expires_at - coalesce(OLD.heartbeat_at, OLD.reserved_at)),
            OLD.lease_expires_at, TG_ARGV[0], session_user);
    END IF;
    IF kind NOT IN ('claimed', 'completed') THEN
        INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,
                                   attempt, attempt_token, worker, actor, reason, db_role)
        VALUES (format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), NEW.id, kind,
                OLD.status, NEW.status, OLD.attempts, OLD.attempt_token, OLD.reserved_by,
                coalesce(nullif(current_setting('jobctl.actor', true), ''), session_user),
                CASE WHEN action IS NOT NULL
                     THEN coalesce(nullif(current_setting('jobctl.reason', true), ''),
                                   NEW.last_error)
                     ELSE NEW.last_error END,
                session_user);
    END IF;

    -- the statistics columns describe the live attempt only ('exact' counts from the claim)
    IF NEW.status = 'processing' AND NEW.attempt_token IS NOT NULL THEN
        NEW.jobctl_attempt := NEW.attempt_token;
        NEW.jobctl_heartbeats := 0;
        NEW.jobctl_max_gap := NULL;
        NEW.jobctl_lease := NEW.lease_expires_at - coalesce(NEW.reserved_at, now());
    ELSIF OLD.jobctl_attempt IS NOT NULL THEN
        NEW.jobctl_attempt := NULL;
        NEW.jobctl_heartbeats := NULL;
        NEW.jobctl_max_gap := NULL;
        NEW.jobctl_lease := NULL;
    END IF;
    RETURN NEW;
END
$function$;

-- Trigger functions run whatever the caller's privileges; EXECUTE only gates CREATE TRIGGER.
-- Without it no role but the owner can attach them to a table of its own (e.g. a temporary
-- table) and write the history through them.
REVOKE ALL ON FUNCTION jobctl.record_change() FROM PUBLIC;
REVOKE ALL ON FUNCTION jobctl.record_transition() FROM PUBLIC;
