-- kb.writable_collections() -> text[]
--
-- The collections the session's login role may write into through kb.submit_document,
-- kb.submit_file and kb.remove_document, NULL meaning every collection. As for
-- kb.readable_collections, the caller is session_user and every role it is a member of: every
-- collection for a superuser, a member of kb_writer (the loader) or of the schema's owner, or a
-- member of a role granted writing of every collection (a kb.collection_grants row with
-- can_write and collection NULL); otherwise the collections granted with can_write (`pgkb db
-- grant ROLE --write --collection NAME`), an empty array when none. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.writable_collections()
RETURNS text[]
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH me AS (
        SELECT r.oid, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user
    ),
    mine AS (  -- the writing grants of every role the login role is a member of
        SELECT g.collection
          FROM kb.collection_grants g
          JOIN pg_catalog.pg_roles r ON r.rolname = g.role_name
          JOIN me ON pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')
         WHERE g.can_write
    )
    SELECT CASE
               WHEN (SELECT me.rolsuper FROM me)
                 OR EXISTS (SELECT 1 FROM me, pg_catalog.pg_roles w
                             WHERE w.rolname = 'kb_writer'
                               AND pg_catalog.pg_has_role(me.oid, w.oid, 'MEMBER'))
                 OR EXISTS (SELECT 1 FROM me, pg_catalog.pg_namespace n
                             WHERE n.nspname = 'kb'
                               AND pg_catalog.pg_has_role(me.oid, n.nspowner, 'MEMBER'))
                 OR EXISTS (SELECT 1 FROM mine WHERE mine.collection IS NULL)
                   THEN NULL
               ELSE coalesce((SELECT pg_catalog.array_agg(DISTINCT mine.collection ORDER BY mine.collection)
                                FROM mine), '{}'::text[])
           END;
$$;

COMMENT ON FUNCTION kb.writable_collections() IS
'The collections the session''s login role may submit documents to and remove them from; NULL = every collection (superusers, the loader''s kb_writer, the owner).';

REVOKE ALL ON FUNCTION kb.writable_collections() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.writable_collections() TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.writable_collections() TO kb_writer;
    END IF;
END
$$;
