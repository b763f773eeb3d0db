-- The trigger functions of the history's versions 1 and 2, dropped: jobctl.record_transition()
-- (migration 001: version 1's two triggers) and jobctl.record_change() (002: version 2's
-- shared trigger). From version 3 on each jobs table's trigger calls a function of its own
-- (jobctl.record_<table>_<hash>), and no trigger schema apply installs calls them: they sat in
-- every database, called by nothing, and a fresh install (the baseline) has neither.
--
-- A trigger of version 1 or 2 that schema apply has not replaced yet still calls one of them:
-- that one stays (DROP FUNCTION refuses what a trigger depends on; each is tried alone), and the
-- step that replaces the trigger drops it once no trigger calls it (the block
-- drop_shared_functions of sql/schema.sql). A DROP FUNCTION locks the function alone: no
-- worker statement calls these.
DO $migration$
DECLARE
    dead pg_catalog.text;
BEGIN
    FOREACH dead IN ARRAY ARRAY['jobctl.record_transition()', 'jobctl.record_change()'] LOOP
        BEGIN
            EXECUTE 'DROP FUNCTION IF EXISTS ' OPERATOR(pg_catalog.||) dead;
        EXCEPTION WHEN dependent_objects_still_exist THEN
            NULL;  -- a trigger not replaced yet calls it
        END;
    END LOOP;
END
$migration$;
