-- A recovery policy per kind or queue of a jobs table: jobctl policy --kind K
-- --manual makes reclaim's one decision (reclaim_action) treat every job of kind K as manual,
-- whatever its row says, and stuck says where the policy came from. One row per table,
-- dimension (kind, queue) and value; every change beside it, with who made it and why.
-- Written by jobctl schema's owner only (like jobctl.tables: it steers reclaim); read by
-- every role that reads the jobs table.
CREATE TABLE jobctl.kind_policies (
    job_table  text        NOT NULL,  -- format('%I.%I', schema, name), as the history records it
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
    policy     text,                  -- NULL: the kind's policy was removed
    reason     text,
    actor      text,
    db_role    text        NOT NULL DEFAULT session_user
);

GRANT SELECT ON jobctl.kind_policies, jobctl.kind_policy_events TO PUBLIC;
