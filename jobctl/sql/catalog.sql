-- What jobctl reads from PostgreSQL's catalog about a table: its shape, never its rows.
-- Named blocks like queries.sql (one namespace with it); %(oid)s is the table's oid.

-- name: table_identity
-- a table named as typed (schema-qualified allowed), as the database spells it. Run under the
-- session's own search_path (user_search_path), to find the table as the user would: so every
-- function, operator and type in it is pg_catalog's, named so (tests/unit/test_sql_search_path.py)
SELECT n.nspname, c.relname, c.oid::pg_catalog.int4 AS oid,
       c.relkind::pg_catalog.text AS relkind,
       pg_catalog.format('%%I.%%I', n.nspname, c.relname) AS qualified,
       -- the first of schema jobctl and the objects in it whose owner does not hold this
       -- session's privileges, and that owner (NULL: none, or no schema): jobctl reads nothing
       -- of such a schema, since a view or function there runs its owner's code as this session
       (SELECT ARRAY[owned.what, r.rolname::pg_catalog.text]
        FROM (SELECT ns.nspowner AS owner, 0 AS n, 'schema jobctl' AS what
              FROM pg_catalog.pg_namespace ns
              WHERE ns.nspname OPERATOR(pg_catalog.=) 'jobctl'::pg_catalog.name
              UNION ALL
              SELECT c.relowner,
                     CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'r'
                               OR c.relkind OPERATOR(pg_catalog.=) 'p' THEN 1 ELSE 2 END,
                     pg_catalog.format('%%s jobctl.%%s',
                                       CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'r'
                                                 OR c.relkind OPERATOR(pg_catalog.=) 'p'
                                                 THEN 'table'
                                            WHEN c.relkind OPERATOR(pg_catalog.=) 'v'
                                                 OR c.relkind OPERATOR(pg_catalog.=) 'm'
                                                 THEN 'view'
                                            WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN 'index'
                                            WHEN c.relkind OPERATOR(pg_catalog.=) 'S'
                                                 THEN 'sequence'
                                            ELSE 'relation' END, c.relname)
              FROM pg_catalog.pg_class c
              WHERE c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
              UNION ALL
              SELECT p.proowner, 3, pg_catalog.format('function jobctl.%%s', p.proname)
              FROM pg_catalog.pg_proc p
              WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
                -- (but a table's reclaimer function, jobctl's operator role's: only the
                -- reclaimer role calls it, as that role; docs/safety.md, The reclaimer role)
                AND NOT (p.prosecdef AND pg_catalog.starts_with(p.proname::pg_catalog.text,
                                                                'reclaim_'))
              UNION ALL
              SELECT o.oprowner, 4, pg_catalog.format('operator jobctl.%%s', o.oprname)
              FROM pg_catalog.pg_operator o
              WHERE o.oprnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl')
              UNION ALL
              SELECT t.typowner, 5, pg_catalog.format('type jobctl.%%s', t.typname)
              FROM pg_catalog.pg_type t
              WHERE t.typnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('jobctl'))
             AS owned
        JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) owned.owner
        WHERE NOT pg_catalog.pg_has_role(owned.owner, CURRENT_USER, 'USAGE')
        ORDER BY owned.n LIMIT 1) AS jobctl_untrusted,
       -- whose privileges jobctl's writes run the table's triggers, checks and defaults with
       -- (the application's code): the session's own when the table's owner holds them all
       -- (a superuser owner, the owner itself, a role the owner is a member of) ...
       pg_catalog.pg_has_role(c.relowner, CURRENT_USER, 'USAGE') AS owner_holds_mine,
       (SELECT o.rolname::pg_catalog.text FROM pg_catalog.pg_roles o
        WHERE o.oid OPERATOR(pg_catalog.=) c.relowner) AS owner,
       (SELECT r.rolsuper FROM pg_catalog.pg_roles r
        WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) AS superuser,
       -- ... else jobctl's operator role, one this session may become: granted UPDATE of
       -- jobctl_action by name (schema grants --operator), not a superuser, the first by name
       (SELECT r.rolname::pg_catalog.text
        FROM pg_catalog.pg_attribute a, pg_catalog.aclexplode(a.attacl) g,
             pg_catalog.pg_roles r
        WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid
          AND a.attname OPERATOR(pg_catalog.=) 'jobctl_action'::pg_catalog.name
          AND NOT a.attisdropped
          AND g.privilege_type OPERATOR(pg_catalog.=) 'UPDATE'::pg_catalog.text
          AND r.oid OPERATOR(pg_catalog.=) g.grantee AND NOT r.rolsuper
          AND pg_catalog.pg_has_role(CURRENT_USER, r.oid, 'MEMBER')
        ORDER BY r.rolname LIMIT 1) AS operator_role,
       -- a function whose owner does not hold this session's privileges, in an index's
       -- expression or predicate or an extended statistics object of the table (or of a
       -- partition): the planner may run it (it folds a function of constants) as whoever
       -- plans a query on the table, every read included
       (SELECT pg_catalog.format('%%s %%I calls %%I.%%I()',
                                 CASE WHEN d.classid OPERATOR(pg_catalog.=)
                                           'pg_catalog.pg_class'::pg_catalog.regclass
                                      THEN 'index' ELSE 'statistics' END,
                                 coalesce(i.relname, st.stxname), pn.nspname, p.proname)
        FROM pg_catalog.pg_depend d
        JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.refobjid
        JOIN pg_catalog.pg_namespace pn ON pn.oid OPERATOR(pg_catalog.=) p.pronamespace
        LEFT JOIN pg_catalog.pg_index x
               ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
              AND x.indexrelid OPERATOR(pg_catalog.=) d.objid
        LEFT JOIN pg_catalog.pg_class i ON i.oid OPERATOR(pg_catalog.=) x.indexrelid
        LEFT JOIN pg_catalog.pg_statistic_ext st
               ON d.classid OPERATOR(pg_catalog.=)
                  'pg_catalog.pg_statistic_ext'::pg_catalog.regclass
              AND st.oid OPERATOR(pg_catalog.=) d.objid
        WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
          AND coalesce(x.indrelid, st.stxrelid) OPERATOR(pg_catalog.=) ANY (ARRAY(
                  SELECT c.oid
                  UNION ALL
                  SELECT t.relid FROM pg_catalog.pg_partition_tree(c.oid) t))
          AND NOT pg_catalog.pg_has_role(p.proowner, CURRENT_USER, 'USAGE')
        LIMIT 1) AS planner_runs,
       pg_catalog.to_regclass('jobctl.tables') IS NOT NULL AS has_mappings,
       pg_catalog.to_regclass('jobctl.kind_policies') IS NOT NULL AS has_kind_policies,
       pg_catalog.to_regclass('jobctl.pauses') IS NOT NULL AS has_pauses,
       -- the history's events, read for the jobs awaiting review (awaiting_candidates)
       CASE WHEN pg_catalog.to_regclass('jobctl.events') IS NULL THEN false
            ELSE pg_catalog.has_table_privilege(pg_catalog.to_regclass('jobctl.events'),
                                                'SELECT') END AS has_history,
       -- the history keeps long texts cut, with their whole length (history 011)
       EXISTS (SELECT FROM pg_catalog.pg_attribute a
               WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('jobctl.events')
                 AND a.attname OPERATOR(pg_catalog.=) 'reason_bytes'::pg_catalog.name
                 AND NOT a.attisdropped) AS has_kept_texts,
       -- reclaim_batch's refusal of a row not written as meant (history 013)
       pg_catalog.to_regprocedure('jobctl.refuse(pg_catalog.text, pg_catalog.text)') IS NOT NULL
           AS has_refuse
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(%(name)s)

-- name: served_tables
-- the tables jobctl serves in this database (its triggers on them; a partition's are its
-- parent's), for the answer to a table that does not exist: which to name instead
SELECT DISTINCT pg_catalog.format('%%I.%%I', n.nspname, c.relname) AS qualified,
       c.relname::pg_catalog.text AS name
FROM pg_catalog.pg_trigger t
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE pg_catalog.starts_with(t.tgname::pg_catalog.text, 'jobctl')
  AND NOT t.tgisinternal AND NOT c.relispartition
ORDER BY 1
LIMIT 20

-- name: partition_probe
-- could a row of this status ({value}) be stored: which partitions the planner keeps for it
EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {column} = {value}::{type}

-- name: current_schema
-- where an unqualified new table is created: under the session's own search_path, like
-- table_identity, so the function is named with its schema
SELECT pg_catalog.current_schema() AS s

-- name: qualified_name
-- a table's schema and name as the history records them: format('%%I.%%I')
SELECT format('%%I.%%I', %(schema)s::text, %(name)s::text) AS qualified

-- name: table_mapping
-- the table's own names for the lease design's, as schema apply recorded them
SELECT mapping FROM jobctl.tables WHERE job_table = %(job_table)s

-- name: column_types
-- the types of some of a table's columns: schema-qualified, and as the database prints them;
-- and the type its values are written as in jobctl's statements (literal_schema/literal_name):
-- a domain's innermost base type (a value cast to the domain would run its CHECK, a function
-- of the application's maybe, inside the history's SECURITY DEFINER function), else its own
SELECT a.attname AS name, tn.nspname AS type_schema, t.typname AS type_name,
       format_type(a.atttypid, a.atttypmod) AS type_display, t.typtype::text AS typtype,
       ln.nspname AS literal_schema, lt.typname AS literal_name,
       -- a domain's base as declared (varchar(36): the length jobctl cuts a reason to)
       CASE WHEN t.typtype OPERATOR(pg_catalog.=) 'd'::pg_catalog.char
            THEN format_type(t.typbasetype, t.typtypmod) END AS base_display,
       -- a unique index on this column alone (no predicate, no expression): no two rows hold
       -- one value of it (for the id: no repeated id to look for, id_repeated)
       EXISTS (SELECT FROM pg_index ix
               WHERE ix.indrelid = a.attrelid AND ix.indisunique AND ix.indnkeyatts = 1
                 AND ix.indkey[0] = a.attnum AND ix.indpred IS NULL
                 AND ix.indexprs IS NULL) AS unique_alone,
       -- no NULL in it (the column's NOT NULL or its domain's): a NULL ready time is judged
       -- only where the column can hold one (available_now, ready_at)
       a.attnotnull OR t.typnotnull AS not_null
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace tn ON tn.oid = t.typnamespace
JOIN pg_type lt ON lt.oid = (
    WITH RECURSIVE down(oid, base) AS (
        SELECT t.oid, t.typbasetype
        UNION ALL
        SELECT d.base, b.typbasetype FROM down d JOIN pg_type b ON b.oid = d.base
        WHERE d.base <> 0)
    SELECT oid FROM down WHERE base = 0 LIMIT 1)
JOIN pg_namespace ln ON ln.oid = lt.typnamespace
WHERE a.attrelid = %(oid)s AND a.attname = ANY(%(names)s::text[]) AND NOT a.attisdropped

-- name: database_identity
-- which database this is, for a saved plan (the system id survives renames)
SELECT current_database() AS database,
       (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier

-- name: table_columns
-- the table's columns, their types, and what kind of type each is (it runs in the operator's
-- writes too, manual._require_audit: every name with its schema)
SELECT a.attname AS name,
       pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
       CASE WHEN t.typtype OPERATOR(pg_catalog.=) 'e'::pg_catalog.char THEN 'enum'
            WHEN t.typtype OPERATOR(pg_catalog.=) 'd'::pg_catalog.char
                 AND bt.typtype OPERATOR(pg_catalog.=) 'e'::pg_catalog.char
                 THEN 'domain over enum'
            WHEN t.typtype OPERATOR(pg_catalog.=) 'd'::pg_catalog.char THEN 'domain'
            ELSE 'base' END AS kind,
       coalesce(bt.oid, t.oid)::pg_catalog.int4 AS base_type_oid,
       pg_catalog.format_type(coalesce(bt.oid, t.oid), NULL) AS base_type,
       a.attnotnull AS not_null
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
LEFT JOIN pg_catalog.pg_type bt ON t.typtype OPERATOR(pg_catalog.=) 'd'::pg_catalog.char
                                AND bt.oid OPERATOR(pg_catalog.=) t.typbasetype
WHERE a.attrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
  AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped
ORDER BY a.attnum

-- name: table_layout
-- primary key, partitioning, and the leaf partitions of a partitioned table
SELECT (SELECT array_agg(a.attname::text ORDER BY k.ord)
        FROM pg_index i
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        WHERE i.indrelid = %(oid)s AND i.indisprimary) AS primary_key,
       (SELECT CASE p.partstrat WHEN 'l' THEN 'list' WHEN 'r' THEN 'range'
                                WHEN 'h' THEN 'hash' END
        FROM pg_partitioned_table p WHERE p.partrelid = %(oid)s) AS partition_strategy,
       (SELECT array_agg(a.attname::text ORDER BY k.ord)
        FROM pg_partitioned_table p
        CROSS JOIN LATERAL unnest(p.partattrs) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = k.attnum
        WHERE p.partrelid = %(oid)s) AS partition_key,
       (SELECT array_agg(t.relid::regclass::text ORDER BY t.relid::regclass::text)
        FROM pg_partition_tree(%(oid)s) t
        WHERE t.isleaf AND t.relid <> %(oid)s::regclass) AS partitions

-- name: status_checks
-- the table's CHECK constraints on one column, as expressions over its columns
SELECT c.conname AS name, pg_get_expr(c.conbin, c.conrelid) AS expression
FROM pg_constraint c
WHERE c.contype = 'c' AND c.conrelid = %(oid)s
  AND (SELECT attnum FROM pg_attribute WHERE attrelid = %(oid)s AND attname = %(column)s)
      = ANY (c.conkey)
ORDER BY c.conname

-- name: history_triggers
-- jobctl's triggers on the table: name, enabled (fires in jobctl's sessions, whose
-- session_replication_role is origin: ENABLE or ENABLE ALWAYS, not ENABLE REPLICA nor
-- DISABLE), arguments (mode, version, digest), and the function each calls (schema.name, and
-- the md5 of its body: is it the one apply would make?)
-- (it runs in the operator's writes too, manual._require_audit: every name with its schema)
SELECT t.tgname::pg_catalog.text AS name,
       (t.tgenabled OPERATOR(pg_catalog.=) 'O'::pg_catalog.char
        OR t.tgenabled OPERATOR(pg_catalog.=) 'A'::pg_catalog.char) AS enabled, t.tgargs,
       n.nspname::pg_catalog.text AS function_schema, p.proname::pg_catalog.text AS function_name,
       pg_catalog.md5(p.prosrc) AS function_md5
FROM pg_catalog.pg_trigger t
JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
WHERE t.tgrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
  AND pg_catalog.starts_with(t.tgname::pg_catalog.text, 'jobctl')

-- name: history_versioned
-- whether the history is versioned here, and readable by this role
SELECT has_schema_privilege('jobctl', 'USAGE')
       AND has_table_privilege('jobctl.migrations', 'SELECT') AS readable
WHERE to_regclass('jobctl.migrations') IS NOT NULL

-- name: history_version
-- the last migration of the history applied to this database
SELECT coalesce(max(version), 0) AS v FROM jobctl.migrations

-- name: table_constraints
-- the table's constraints, and whether each is validated
SELECT conname, convalidated, contype::text AS kind,
       pg_get_constraintdef(oid) AS definition
FROM pg_constraint WHERE conrelid = %(oid)s

-- name: reclaim_index_candidates
-- the table's indexes: validity, predicate and key columns (to find a reclaim index by shape)
SELECT c.relname, i.indisvalid, pg_get_expr(i.indpred, i.indrelid) AS predicate,
       (SELECT array_agg(a.attname::text ORDER BY k.n)
        FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) AS keys
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = %(oid)s

-- name: lock_target
-- a table named as typed, and now: what a step's tries wait on, and since when
SELECT to_regclass(%(name)s)::oid::int AS oid, clock_timestamp() AS since

-- name: index_valid
-- an index named with its schema: whether it is valid (no row: no such index); an invalid one
-- is what an interrupted CREATE INDEX CONCURRENTLY leaves (migrations.concurrent_steps)
SELECT i.indisvalid AS valid
FROM pg_catalog.pg_index i
WHERE i.indexrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(%(name)s)::pg_catalog.oid

-- name: probe_role
-- who asks the column's type and CHECKs about a value (a domain's CHECK, a CHECK's function:
-- the application's code): the table's owner, and whether it holds this session's privileges
-- (then the session asks itself) or the session may become it (SET LOCAL ROLE)
SELECT o.rolname::pg_catalog.text AS owner,
       pg_catalog.pg_has_role(c.relowner, CURRENT_USER, 'USAGE') AS owner_holds_mine,
       pg_catalog.pg_has_role(CURRENT_USER, c.relowner, 'MEMBER') AS may_become
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner
WHERE c.oid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid

-- name: become_role
-- the role the rest of the transaction (or savepoint) runs as ('none': the session's own)
SELECT pg_catalog.set_config('role', %(role)s, true)

-- name: cast_probe
-- does the column's type ({type}: enum, domain, varchar(n)) accept this value? (errors if not)
SELECT %(value)s::{type}

-- name: check_probe
-- does a CHECK ({expression}, over the table's columns) accept a row holding only this value?
SELECT ({expression}) IS NOT FALSE AS ok FROM (SELECT %(value)s::{type} AS {column}) AS j

-- name: history_rows_estimate
-- about how many rows the history holds (the planner's estimate: no scan)
SELECT sum(greatest(c.reltuples, 0))::bigint AS rows
FROM pg_class c
WHERE c.oid IN (to_regclass('jobctl.attempts'), to_regclass('jobctl.events'))

-- name: partition_tree
-- a table and its partitions at every level (the table itself first, at level 0): where each
-- lives, whether it is partitioned in turn, a foreign table, and the partition it belongs to
SELECT t.relid::oid::int AS oid, t.parentrelid::oid::int AS parent_oid, t.level,
       c.relkind::text AS relkind, n.nspname, c.relname,
       format('%%I.%%I', n.nspname, c.relname) AS qualified
FROM pg_partition_tree(%(oid)s) t
JOIN pg_class c ON c.oid = t.relid
JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY t.level, n.nspname, c.relname

-- name: partition_index_candidates
-- the indexes of a table and of all its partitions: validity, predicate, key columns (to find
-- the reclaim index by shape), and the index each is attached to (a partitioned one), if any
SELECT i.indrelid::int AS table_oid, c.relname, i.indisvalid,
       pg_get_expr(i.indpred, i.indrelid) AS predicate,
       (SELECT array_agg(a.attname::text ORDER BY k.n)
        FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) AS keys,
       i.indexrelid::int AS oid,
       (SELECT h.inhparent::int FROM pg_inherits h WHERE h.inhrelid = i.indexrelid) AS attached_to
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid IN (SELECT relid FROM pg_partition_tree(%(oid)s))

-- name: relations_named
-- which of these names (schema, name pairs) are taken in their schema, and by what: an index
-- names its table
SELECT n.nspname, c.relname, c.relkind::text AS relkind, i.indrelid::int AS table_oid
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_index i ON i.indexrelid = c.oid
WHERE (n.nspname, c.relname) IN
      (SELECT s, r FROM unnest(%(schemas)s::text[], %(names)s::text[]) AS x(s, r))


-- name: replica_state
-- is this server a standby (in recovery), and how far behind: replay paused, the age of the
-- last replayed transaction, and whether replay has caught up with all the WAL received
-- (then an idle primary, not a slow standby, is why that age grows). Callable by any role.
SELECT pg_catalog.pg_is_in_recovery() AS standby,
       CASE WHEN pg_catalog.pg_is_in_recovery()
            THEN pg_catalog.pg_is_wal_replay_paused() ELSE false END AS paused,
       extract(epoch FROM pg_catalog.now() - pg_catalog.pg_last_xact_replay_timestamp())::float8
           AS replay_age_s,
       coalesce(pg_catalog.pg_last_wal_receive_lsn() = pg_catalog.pg_last_wal_replay_lsn(),
                false) AS caught_up,
       -- NULL: no WAL receiver; 'hidden': one this role may not see (pg_read_all_stats)
       (SELECT coalesce(w.status, 'hidden') FROM pg_catalog.pg_stat_wal_receiver w) AS receiver

-- name: library_columns
-- the table's columns for recognising a queue library (jobctl.libraries): each one's type
-- (a domain's base type), whether it is an enum (or a domain over one), the enum's labels and
-- the enum type's own name
SELECT a.attname::text AS name,
       format_type(coalesce(bt.oid, t.oid), NULL) AS type,
       coalesce(bt.typtype, t.typtype) = 'e' AS is_enum,
       coalesce(bt.typname, t.typname)::text AS type_name,
       (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
        FROM pg_enum e WHERE e.enumtypid = coalesce(bt.oid, t.oid)) AS labels
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum

-- name: library_neighbours
-- the names and column names of the other tables in the table's schema (a queue library's
-- companion tables), at most 500 of them: a catalog read, never a row of theirs
SELECT c.relname::text AS name, array_agg(a.attname::text) AS columns
FROM (SELECT c.oid, c.relname FROM pg_class c
      WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = %(oid)s)
        AND c.relkind IN ('r', 'p') AND c.oid <> %(oid)s AND NOT c.relispartition
      ORDER BY c.oid LIMIT 500) AS c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
GROUP BY c.oid, c.relname

-- name: library_triggers
-- the names of the table's own triggers (not the internal ones of its foreign keys), for
-- recognising a queue library by the trigger it puts on its jobs table
SELECT t.tgname::text AS name
FROM pg_trigger t
WHERE t.tgrelid = %(oid)s AND NOT t.tgisinternal

-- name: status_common_values
-- the status column's most common values as ANALYZE saw them across the whole table (no scan;
-- none before the table was analysed, or when this role cannot read the column)
SELECT most_common_vals::text::text[] AS vals
FROM pg_stats
WHERE schemaname = %(schema)s AND tablename = %(name)s AND attname = %(column)s

-- name: jobctl_owners
-- who owns schema jobctl and every object in it (tables, sequences, indexes, views, functions,
-- types but the row and array types of its tables), for ownership.py: the schema and each
-- object with its owner, whether the owner is a superuser and whether it is the current role
SELECT o.kind, o.name, r.rolname AS owner, r.rolsuper AS owner_is_superuser,
       o.owner_oid OPERATOR(pg_catalog.=) (SELECT m.oid FROM pg_catalog.pg_roles m
                                           WHERE m.rolname OPERATOR(pg_catalog.=)
                                                 pg_catalog.current_user()) AS owned_by_me
FROM (SELECT 'schema'::pg_catalog.text AS kind, n.nspname::pg_catalog.text AS name,
             n.nspowner AS owner_oid, 0 AS sort
      FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
      UNION ALL
      SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'S' THEN 'sequence'
                  WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' WHEN 'v' THEN 'view'
                  WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table'
                  ELSE 'relation' END,
             c.relname::pg_catalog.text, c.relowner, 1
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
      UNION ALL
      SELECT 'function', p.proname::pg_catalog.text, p.proowner, 2
      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
      UNION ALL
      SELECT 'type', t.typname::pg_catalog.text, t.typowner, 3
      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
        AND t.typrelid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
        AND NOT EXISTS (SELECT FROM pg_catalog.pg_type e
                        WHERE e.typarray OPERATOR(pg_catalog.=) t.oid)
      UNION ALL
      SELECT 'operator', o.oprname::pg_catalog.text, o.oprowner, 4
      FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl') AS o
JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) o.owner_oid
ORDER BY o.sort, o.name

-- name: jobctl_grants
-- the privileges on schema jobctl and its objects held by roles other than their owner (PUBLIC
-- as 'PUBLIC'): the schema's, each relation's and column's, each function's
SELECT g.kind, g.name, coalesce(r.rolname::pg_catalog.text, 'PUBLIC') AS grantee,
       g.privilege
FROM (SELECT 'schema'::pg_catalog.text AS kind, n.nspname::pg_catalog.text AS name,
             a.grantee, a.privilege_type AS privilege, n.nspowner AS owner_oid
      FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
      UNION ALL
      SELECT 'table', c.relname::pg_catalog.text, a.grantee, a.privilege_type, c.relowner
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace,
           pg_catalog.aclexplode(c.relacl) a
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
      UNION ALL
      SELECT 'column', pg_catalog.concat(c.relname, '.', t.attname), a.grantee, a.privilege_type,
             c.relowner
      FROM pg_catalog.pg_attribute t
      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.attrelid
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace,
           pg_catalog.aclexplode(t.attacl) a
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
      UNION ALL
      SELECT 'function', p.proname::pg_catalog.text, a.grantee, a.privilege_type, p.proowner
      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace,
           pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
      WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl') AS g
LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) g.grantee
WHERE g.grantee OPERATOR(pg_catalog.<>) g.owner_oid
ORDER BY g.kind, g.name, grantee, g.privilege

-- name: jobctl_attached
-- what others may have put on jobctl's tables: triggers (jobctl puts none), rules, row
-- security policies, row security switched on
SELECT 'trigger'::pg_catalog.text AS kind, t.tgname::pg_catalog.text AS name,
       c.relname::pg_catalog.text AS on_table
FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl' AND NOT t.tgisinternal
UNION ALL
SELECT 'rule', w.rulename::pg_catalog.text, c.relname::pg_catalog.text
FROM pg_catalog.pg_rewrite w JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) w.ev_class
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl' AND w.rulename OPERATOR(pg_catalog.<>) '_RETURN'
UNION ALL
SELECT 'policy', p.polname::pg_catalog.text, c.relname::pg_catalog.text
FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.polrelid
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl'
UNION ALL
SELECT 'row security', c.relname::pg_catalog.text, c.relname::pg_catalog.text
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE n.nspname OPERATOR(pg_catalog.=) 'jobctl' AND c.relrowsecurity
ORDER BY 1, 3, 2

-- name: column_lengths
-- a table's columns in order, each with whether its type is of variable length (text, jsonb,
-- bytea, arrays ...: a value that can be long, cut for display by job_row_shown)
SELECT a.attname::pg_catalog.text AS name,
       t.typlen OPERATOR(pg_catalog.<) 0::pg_catalog.int2 AS variable
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
WHERE a.attrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
  AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped
ORDER BY a.attnum

-- name: leading_index
-- a valid index of the table whose first key is the column %(column)s (--kind on a large
-- table: schema check notices when there is none), with the table's size as the planner
-- believes it
SELECT (SELECT ic.relname::pg_catalog.text
        FROM pg_catalog.pg_index i
        JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid
        JOIN pg_catalog.pg_attribute a
             ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid
            AND a.attnum OPERATOR(pg_catalog.=) i.indkey[0]
        WHERE i.indrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid AND i.indisvalid
          AND a.attname OPERATOR(pg_catalog.=) %(column)s::pg_catalog.name
        ORDER BY 1 LIMIT 1) AS index,
       (SELECT greatest(c.reltuples, 0)::pg_catalog.int8 FROM pg_catalog.pg_class c
        WHERE c.oid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid) AS rows

-- name: coalesced_key
-- the claim's ready time where the column %(column)s can hold a NULL,
-- COALESCE(column, '-infinity'::its type) (column_types.ready_at), as pg_get_indexdef
-- writes it as an index's key: the column's name quoted where it needs quotes, a domain's
-- column cast to the domain's innermost base type (ordered_index compares it so)
SELECT pg_catalog.format('COALESCE(%%s, %%L::%%s)',
           CASE WHEN t.typtype OPERATOR(pg_catalog.=) 'd'::pg_catalog.char
                THEN pg_catalog.format('(%%s)::%%s', pg_catalog.quote_ident(a.attname),
                                       pg_catalog.format_type(b.oid, NULL))
                ELSE pg_catalog.quote_ident(a.attname) END,
           '-infinity', pg_catalog.format_type(b.oid, NULL)) AS key
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
JOIN pg_catalog.pg_type b ON b.oid OPERATOR(pg_catalog.=) (
    WITH RECURSIVE down(oid, base) AS (
        SELECT t.oid, t.typbasetype
        UNION ALL
        SELECT d.base, x.typbasetype FROM down d
        JOIN pg_catalog.pg_type x ON x.oid OPERATOR(pg_catalog.=) d.base
        WHERE d.base OPERATOR(pg_catalog.<>) 0::pg_catalog.oid)
    SELECT down.oid FROM down WHERE down.base OPERATOR(pg_catalog.=) 0::pg_catalog.oid LIMIT 1)
WHERE a.attrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid
  AND a.attname OPERATOR(pg_catalog.=) %(column)s::pg_catalog.name

-- name: ordered_index
-- a valid btree index of the table that serves an ORDER BY of the columns %(columns)s (or
-- expressions, as pg_get_indexdef writes an index's key: coalesced_key) in the
-- directions %(options)s (pg_index.indoption's bits: 1 DESC, 2 NULLS FIRST): led by the first
-- column in its direction or in the reverse of it (a backward scan, which reverses NULLS too),
-- the one whose scan gives the most of the ORDER BY (the keys it lacks are sorted among the
-- rows equal in those it gives; at least %(least)s of them), with the table's size as the
-- planner believes it; schema check notices when there is none
SELECT (SELECT ic.relname::pg_catalog.text
        FROM pg_catalog.pg_index i
        JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid
        JOIN pg_catalog.pg_am am ON am.oid OPERATOR(pg_catalog.=) ic.relam
        CROSS JOIN LATERAL (  -- how many keys of the ORDER BY a scan gives, forward or backward
            SELECT pg_catalog.max(scan.keys) AS keys
            FROM (VALUES (0::pg_catalog.int2), (3::pg_catalog.int2)) AS f(flip)
            CROSS JOIN LATERAL (
                SELECT coalesce(pg_catalog.min(k.n) OPERATOR(pg_catalog.-) 1,
                                pg_catalog.cardinality(%(columns)s::pg_catalog.text[])) AS keys
                FROM ROWS FROM (pg_catalog.unnest(%(columns)s::pg_catalog.text[]),
                                pg_catalog.unnest(%(options)s::pg_catalog.int2[]))
                     WITH ORDINALITY AS k(name, want, n)
                LEFT JOIN pg_catalog.pg_attribute a
                     ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid
                    AND a.attnum OPERATOR(pg_catalog.=)
                        i.indkey[(k.n OPERATOR(pg_catalog.-) 1)::pg_catalog.int4]
                    AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2
                WHERE k.n OPERATOR(pg_catalog.>) i.indnkeyatts::pg_catalog.int8
                   OR coalesce(a.attname::pg_catalog.text,
                               pg_catalog.pg_get_indexdef(i.indexrelid, k.n::pg_catalog.int4,
                                                          false))
                      IS DISTINCT FROM k.name
                   OR (i.indoption[(k.n OPERATOR(pg_catalog.-) 1)::pg_catalog.int4]
                       OPERATOR(pg_catalog.&) 3::pg_catalog.int2)
                      OPERATOR(pg_catalog.<>) (k.want OPERATOR(pg_catalog.#) f.flip)
            ) AS scan) AS led
        WHERE i.indrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid AND i.indisvalid
          AND am.amname OPERATOR(pg_catalog.=) 'btree'::pg_catalog.name
          AND led.keys OPERATOR(pg_catalog.>=) %(least)s::pg_catalog.int8
        ORDER BY led.keys DESC, 1 LIMIT 1) AS index,
       (SELECT greatest(c.reltuples, 0)::pg_catalog.int8 FROM pg_catalog.pg_class c
        WHERE c.oid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid) AS rows

-- name: row_security_refusal
-- the tables whose row security can refuse a query of jobctl's (it runs with row_security
-- off): each with its policies, those named %(name)s alone when given (the refusal's text
-- names the table, unqualified); read after the refused transaction ended (db.connection)
SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname) AS qualified,
       pg_catalog.array_remove(pg_catalog.array_agg(p.polname::pg_catalog.text
                                                    ORDER BY p.polname), NULL) AS policies
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
LEFT JOIN pg_catalog.pg_policy p ON p.polrelid OPERATOR(pg_catalog.=) c.oid
WHERE c.relrowsecurity
  AND (%(name)s::pg_catalog.text IS NULL OR c.relname OPERATOR(pg_catalog.=) %(name)s)
GROUP BY n.nspname, c.relname
ORDER BY 1
LIMIT 5

-- name: table_row_security
-- row security on the jobs table: on, forced on its owner, its policies, and the roles that
-- hold a privilege on it (but its owner), each with whether it bypasses row security (a
-- superuser or BYPASSRLS): the others are refused by jobctl, which runs no policy's code
SELECT c.relrowsecurity AS enabled, c.relforcerowsecurity AS forced,
       ARRAY(SELECT p.polname::pg_catalog.text FROM pg_catalog.pg_policy p
                        WHERE p.polrelid OPERATOR(pg_catalog.=) c.oid ORDER BY 1) AS policies,
       ARRAY(SELECT DISTINCT r.rolname::pg_catalog.text
                        FROM pg_catalog.aclexplode(c.relacl) a
                        JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
                        WHERE a.grantee OPERATOR(pg_catalog.<>) c.relowner
                          AND NOT (r.rolsuper OR r.rolbypassrls) ORDER BY 1) AS refused,
       ARRAY(SELECT DISTINCT r.rolname::pg_catalog.text
                        FROM pg_catalog.aclexplode(c.relacl) a
                        JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
                        WHERE a.grantee OPERATOR(pg_catalog.<>) c.relowner
                          AND (r.rolsuper OR r.rolbypassrls) ORDER BY 1) AS bypassing
FROM pg_catalog.pg_class c
WHERE c.oid OPERATOR(pg_catalog.=) %(oid)s

-- name: roles_bypassing_row_security
-- of the roles named, those that bypass row security (a superuser or BYPASSRLS)
SELECT r.rolname::pg_catalog.text AS role
FROM pg_catalog.pg_roles r
WHERE r.rolname OPERATOR(pg_catalog.=) ANY(%(roles)s::pg_catalog.text[])
  AND (r.rolsuper OR r.rolbypassrls)

-- name: id_unique_alone
-- whether a unique index (no predicate) keys the table on the id column alone: then no id can
-- repeat. A partitioned table's unique key must hold its partition key, so one partitioned by
-- anything but the id has none (schema/shape.repeated_id then reads the rows)
SELECT EXISTS (
    SELECT FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid
                                  AND a.attnum OPERATOR(pg_catalog.=) i.indkey[0]
    WHERE i.indrelid OPERATOR(pg_catalog.=) %(oid)s::pg_catalog.oid AND i.indisunique
      AND i.indpred IS NULL AND i.indnkeyatts OPERATOR(pg_catalog.=) 1
      AND a.attname OPERATOR(pg_catalog.=) %(column)s::pg_catalog.name) AS unique

-- name: time_zone_known
-- whether the server knows the zone %(zone)s by name (schema apply --time-zone): the zone a
-- table's times without a zone are read and written in by every statement
SELECT EXISTS (SELECT FROM pg_catalog.pg_timezone_names z
               WHERE z.name OPERATOR(pg_catalog.=) %(zone)s::pg_catalog.text) AS known
