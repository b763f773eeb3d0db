-- What a reclaim records is what was written (issue 55, finding 3): reclaim_batch judges, in
-- the statement itself, every row it locked by what its UPDATE wrote (the block
-- reclaim_as_meant of sql/queries.sql), and a row an application's BEFORE trigger kept back
-- (RETURN NULL) or changed back makes the statement fail through this function: the batch's
-- transaction then rolls back, the history's events with it (jobctl's trigger fired first, in
-- that transaction), and reclaim tries the batch again row by row, where the row is skipped and
-- nothing of it recorded. SQL has no RAISE: this is one, with SQLSTATE JC001 (jobctl's own
-- class, which no PostgreSQL error uses) and what was written of the row as JSON in its DETAIL.
--
-- SECURITY INVOKER, and it reads nothing: it runs as whoever calls it (jobctl's write role, the
-- reclaimer function's owner) and can only raise, so EXECUTE is PUBLIC's (the default, granted
-- again here to say so): schema check allows it (ownership.ALLOWED_ON). Its body looks nothing
-- up by name. A CREATE FUNCTION: a change of the catalog, no lock on any table.
CREATE FUNCTION jobctl.refuse(message pg_catalog.text, detail pg_catalog.text)
RETURNS pg_catalog.bool LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $$BEGIN RAISE EXCEPTION USING ERRCODE = 'JC001', MESSAGE = $1, DETAIL = $2; END$$;
COMMENT ON FUNCTION jobctl.refuse(pg_catalog.text, pg_catalog.text) IS
    'jobctl: reclaim_batch''s refusal of a row not written as meant (SQLSTATE JC001); history 013';
GRANT EXECUTE ON FUNCTION jobctl.refuse(pg_catalog.text, pg_catalog.text) TO PUBLIC;
