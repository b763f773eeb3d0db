-- The texts an application writes, kept by the history at most 4096 characters long, with the
-- whole one's length beside them (hostile role, round three: a 30 MB worker name and
-- last_error made each row of a reclaim write 90 MB into the history, 58 s of a 64 s commit of
-- 16 such rows). (Numbered after 010: a database that applied 010 first never runs a lower one.)
--
-- The trigger (history_function_body in sql/schema.sql, trigger version 4) stores a worker's
-- name (events.worker, attempts.worker) and an event's reason (events.reason: a worker's
-- last_error, an operator's --reason) whole when they are 4096 characters or fewer, the same
-- limit as every read's cut; a longer one as its first 4096 characters, and here the whole
-- text's length in bytes (read from its header, not from the value). NULL: the text is stored
-- whole (every row written before this version, and every ordinary one). The reads show a
-- kept text with a note of the bytes the history did not keep; see docs/history.md.
--
-- Nullable columns without a default: a change of the catalog, no rewrite. Each ALTER takes an
-- ACCESS EXCLUSIVE lock on its table for that instant (schema apply tries it with short lock
-- timeouts, like every step of the history), in the order the trigger writes the tables.
ALTER TABLE jobctl.attempts ADD COLUMN worker_bytes bigint;
ALTER TABLE jobctl.events ADD COLUMN worker_bytes bigint, ADD COLUMN reason_bytes bigint;
