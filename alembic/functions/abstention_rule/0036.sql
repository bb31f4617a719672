-- kb.abstention_rule() -> jsonb
--
-- The abstention rule `pgkb eval --calibrate` stored (kb.settings, key 'abstention'), NULL when
-- none was stored: what the abstention gate applies unless the abstention_rule setting overrides
-- it. Reads only (STABLE).
CREATE OR REPLACE FUNCTION kb.abstention_rule()
RETURNS jsonb
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.value FROM kb.settings s WHERE s.key = 'abstention';
$$;

COMMENT ON FUNCTION kb.abstention_rule() IS
'The calibrated abstention rule stored in kb.settings (NULL when none was stored).';

REVOKE ALL ON FUNCTION kb.abstention_rule() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.abstention_rule() TO kb_reader;
    END IF;
END
$$;
