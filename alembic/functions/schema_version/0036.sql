-- kb.schema_version() -> text
--
-- The Alembic revision the kb schema is at (kb.alembic_version.version_num), NULL when the
-- table holds no row. pgkb checks it before every command, so a role without any table
-- privilege (kb_reader) can learn whether its pgkb matches the database. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.schema_version()
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT v.version_num::text FROM kb.alembic_version v LIMIT 1;
$$;

COMMENT ON FUNCTION kb.schema_version() IS
'The Alembic revision of the kb schema (NULL when none is recorded), readable without table privileges.';

REVOKE ALL ON FUNCTION kb.schema_version() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.schema_version() TO kb_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        GRANT EXECUTE ON FUNCTION kb.schema_version() TO kb_writer;
    END IF;
END
$$;
