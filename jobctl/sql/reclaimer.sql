-- The reclaimer role's function (schema grants --reclaimer, jobctl/schema/reclaimer.py): a
-- SECURITY DEFINER function per jobs table, jobctl.reclaim_<table>_<hash>, whose body is
-- reclaim_batch itself as the CLI sends it (its parameters as the function's), owned by the
-- role jobctl's own writes run as (docs/safety.md, "The reclaimer role"). Named blocks in the
-- namespace of queries.sql; %(oid)s is the jobs table's oid.

-- name: reclaimer_type
-- a type (a parameter's or a result column's, by oid) as the function's declaration names it:
-- with its schema (an array type by its own name, _text, in the element's schema)
SELECT pg_catalog.format('%%I.%%I', n.nspname, t.typname) AS name
FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
WHERE t.oid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid

-- name: reclaimer_facts
-- who would own the function: the installer when the table's owner holds all its privileges
-- (the installer then runs nothing of the application's with more than the owner's); whether
-- the installer is a superuser (only one can give the function to jobctl's operator role); the
-- reclaimer role's privileges on the table (it must hold no UPDATE, it is no superuser)
SELECT pg_catalog.pg_has_role(c.relowner, CURRENT_USER, 'USAGE') AS owner_holds_mine,
       (SELECT r.rolsuper FROM pg_catalog.pg_roles r
        WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) AS superuser,
       (SELECT r.rolsuper FROM pg_catalog.pg_roles r
        WHERE r.rolname OPERATOR(pg_catalog.=) %(role)s::pg_catalog.name) AS role_superuser,
       CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles r
                         WHERE r.rolname OPERATOR(pg_catalog.=) %(role)s::pg_catalog.name)
            THEN pg_catalog.has_table_privilege(%(role)s::pg_catalog.name, c.oid, 'UPDATE')
                 OR pg_catalog.has_any_column_privilege(%(role)s::pg_catalog.name, c.oid,
                                                        'UPDATE') END AS role_updates
FROM pg_catalog.pg_class c
WHERE c.oid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid

-- name: reclaimer_existing
-- the table's reclaimer function as installed (every overload of its name), each by its
-- signature: dropped before it is made again (another jobctl may have made other parameters)
SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text AS signature
FROM pg_catalog.pg_proc p
WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
  AND p.proname OPERATOR(pg_catalog.=) %(name)s::pg_catalog.name

-- name: reclaimer_bodies
-- the bodies of the table's reclaimer function as installed (every overload of its name):
-- schema check compares them with reclaim_batch as composed now
SELECT p.prosrc AS body
FROM pg_catalog.pg_proc p
WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
  AND p.proname OPERATOR(pg_catalog.=) %(name)s::pg_catalog.name

-- name: reclaimer_drop
-- a reclaimer function made before, by its signature (reclaimer_existing)
DROP FUNCTION IF EXISTS {signature}

-- name: reclaimer_create
-- the table's reclaimer function ({function}): reclaim_batch for one batch, as the CLI sends it
-- ({body}, its parameters $1..$n as the statement's, --park-older-than fixed to none and the
-- grace never below 0: no choice of its caller's makes it requeue a live lease or fail a job
-- the policy would requeue). SECURITY DEFINER, given by {give} to its owner (reclaimer_owner,
-- or empty: the installer keeps it); no SET
-- search_path, as history_function: the body names every schema. EXECUTE for {role} alone
CREATE FUNCTION {function}({arguments}) RETURNS TABLE ({columns})
LANGUAGE sql VOLATILE SECURITY DEFINER AS {body};
REVOKE ALL ON FUNCTION {function}({argument_types}) FROM PUBLIC;
COMMENT ON FUNCTION {function}({argument_types}) IS {comment};
{give}GRANT EXECUTE ON FUNCTION {function}({argument_types}) TO {role};
GRANT INSERT, UPDATE ON jobctl.reclaimer_passes TO {role}

-- name: reclaimer_owner
-- the function given to jobctl's operator role (a superuser's step: the role holds no CREATE
-- on schema jobctl, so it can neither make nor replace it, only call, alter or drop it)
ALTER FUNCTION {function}({argument_types}) OWNER TO {owner};

-- name: reclaimer_installed
-- the table's reclaimer function, when this session is the reclaimer: it may EXECUTE it and
-- holds no UPDATE on the table (an operator reclaims with reclaim_batch itself); its
-- parameters' names and types, in order, as reclaimer_call passes them, and its body (compared
-- with reclaim_batch as composed now: one made for another mapping is refused)
SELECT p.proargnames::pg_catalog.text[] AS names, p.prosrc AS body,
       ARRAY(SELECT pg_catalog.format('%%I.%%I', n.nspname, t.typname)
             FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY
                  AS a(oid, k)
             JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.oid
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
             ORDER BY a.k) AS types
FROM pg_catalog.pg_proc p
WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
  AND p.proname OPERATOR(pg_catalog.=) %(name)s::pg_catalog.name
  AND p.prosecdef
  AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
  AND NOT pg_catalog.has_table_privilege(%(oid)s::pg_catalog.oid, 'UPDATE')
  AND NOT pg_catalog.has_any_column_privilege(%(oid)s::pg_catalog.oid, 'UPDATE')
LIMIT 1

-- name: reclaimer_call
-- one batch of the reclaim through the table's reclaimer function ({reclaimer_function},
-- {reclaimer_arguments}: each parameter of reclaim_batch by name, cast to the function's
-- type): the same rows reclaim_batch returns, as the function's owner wrote them
SELECT r.* FROM {reclaimer_function}({reclaimer_arguments}) AS r
