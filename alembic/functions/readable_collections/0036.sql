-- kb.readable_collections() -> text[]
--
-- The collections the session's login role may read, NULL meaning every collection. The caller
-- is session_user (the role that logged in), not current_user: inside a SECURITY DEFINER
-- function current_user is the owner, and SET ROLE can only move to a role the login role is a
-- member of, so the union over those roles is everything the session could ever read. Every
-- collection when the login role is a superuser, a member of kb_writer or of the schema's owner
-- (writers and owners are unaffected), or when it is a member (directly or not) of a role
-- granted every collection in kb.collection_grants (collection NULL: `pgkb db grant ROLE --read`
-- without --collection); otherwise the collections granted to those roles, an empty array when
-- none. Grants to roles that no longer exist are ignored. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.readable_collections()
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
    mine AS (  -- the grants of every role the login role is a member of
        SELECT g.collection
          FROM kb.collection_grants g
          JOIN pg_catalog.pg_roles r ON r.rolname = g.role_name
          JOIN me ON pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')
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

COMMENT ON FUNCTION kb.readable_collections() IS
'The collections the session''s login role (session_user, and every role it is a member of) may read; NULL = every collection (superusers, writers, the owner, roles granted all).';

REVOKE ALL ON FUNCTION kb.readable_collections() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.readable_collections() TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.readable_collections() TO kb_writer;
    END IF;
END
$$;
