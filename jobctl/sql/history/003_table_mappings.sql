-- Each jobs table's own names for the lease design's columns and statuses, recorded by
-- schema apply (--column, --status, --park-status) so that every command, the worker API and
-- the history trigger read the same mapping, whoever is on call. A table without a row here
-- uses the design's names.

CREATE TABLE jobctl.tables (
    job_table  text PRIMARY KEY,     -- format('%I.%I', schema, name), as the history records it
    mapping    jsonb NOT NULL,       -- {"columns": {design: actual}, "statuses": {...},
                                     --  "park_status": value or null}; see jobctl/mapping.py
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT session_user
);

-- Everyone who reads the jobs table must read its mapping: the workers (jobctl.lease) and
-- the roles granted before this version. It holds column and status names only.
GRANT USAGE ON SCHEMA jobctl TO PUBLIC;
GRANT SELECT ON jobctl.tables TO PUBLIC;
