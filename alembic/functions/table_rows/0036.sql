-- kb.table_rows(relation regclass) -> bigint
--
-- The exact number of rows of `relation` (count(*)), for kb.stats on a table the planner has
-- no estimate of yet (pg_class.reltuples -1: never analyzed). Reads only (STABLE). Not granted
-- to anyone: kb.stats (SECURITY DEFINER) calls it as the owner, for kb's own tables.
CREATE OR REPLACE FUNCTION kb.table_rows(relation regclass)
RETURNS bigint
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %s', relation) INTO n;
    RETURN n;
END;
$$;

COMMENT ON FUNCTION kb.table_rows(regclass) IS
'The exact row count of a table (kb.stats uses it for a table never analyzed).';

REVOKE ALL ON FUNCTION kb.table_rows(regclass) FROM PUBLIC;
