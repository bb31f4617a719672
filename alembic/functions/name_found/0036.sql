-- kb.name_found(phrase text, surface_regex text) -> boolean
--
-- Does the name `phrase` occur in some chunk? True when the phrase is made only of stop words
-- (nothing to look for), else when a chunk matches phraseto_tsquery('english', phrase) (the
-- GIN index on tsv narrows the candidates) and its heading path and text match surface_regex
-- (case-insensitive; the abstention gate passes the phrase as whole words, so "LATERAL" is not
-- found in a chunk that says "later"). The first 1,000 characters of each argument are read.
-- An invalid regular expression raises invalid_regular_expression. Reads only (STABLE).
-- Only chunks of the caller's collections (kb.collection_scope) count, so the answer says
-- nothing about a collection the caller may not read.
CREATE OR REPLACE FUNCTION kb.name_found(phrase text, surface_regex text)
RETURNS boolean
LANGUAGE sql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT numnode(phraseto_tsquery('english'::regconfig, left(phrase, 1000))) = 0
        OR EXISTS (SELECT 1 FROM kb.chunks c
                     JOIN kb.documents d ON d.id = c.document_id
                    WHERE c.tsv @@ phraseto_tsquery('english'::regconfig, left(phrase, 1000))
                      AND coalesce(d.collection = ANY ((SELECT kb.collection_scope(NULL))::text[]), true)
                      AND (c.heading_path || ' ' || c.content) ~* left(surface_regex, 1000));
$$;

COMMENT ON FUNCTION kb.name_found(text, text) IS
'Whether a name occurs in some chunk: its phrase query matches and the surface regex (whole words, any case) confirms it. Maximum: 1000 characters of each argument.';

REVOKE ALL ON FUNCTION kb.name_found(text, text) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.name_found(text, text) TO kb_reader;
    END IF;
END
$$;
