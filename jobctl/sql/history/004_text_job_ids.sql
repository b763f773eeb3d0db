-- Job ids of any type: jobctl.events.job_id and jobctl.attempts.job_id become text, the
-- canonical text of the id (bigint 42 -> '42', a uuid -> its lower-case text, a text or ULID
-- id as it is). Each jobs table's trigger function writes OLD.id::text (see the block
-- history_function_body in sql/schema.sql); the readers compare job_id with the id's text.
--
-- COLLATE "C": ids are compared for equality only, and byte comparison is the cheapest for
-- the index the trigger inserts into on every completion.
--
-- This rewrites both tables and rebuilds their indexes (events_job_idx and attempts_job_idx,
-- which serve the readers: job_table, job_id) under an ACCESS EXCLUSIVE lock: the workers'
-- statements that write the history (completions, failures, retries) wait for it. Measured
-- at about 1.6 s per million rows; see docs/history.md, "Upgrading to version 4".
-- Both locks first, in the order the trigger writes the tables (attempts, then events).
LOCK TABLE jobctl.attempts, jobctl.events IN ACCESS EXCLUSIVE MODE;
ALTER TABLE jobctl.attempts ALTER COLUMN job_id TYPE text COLLATE "C" USING job_id::text;
ALTER TABLE jobctl.events ALTER COLUMN job_id TYPE text COLLATE "C" USING job_id::text;
