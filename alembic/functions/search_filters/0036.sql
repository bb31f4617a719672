-- kb.search_filters(filters jsonb)
--   -> (category text[], metadata jsonb, source_pattern text, collections text[])
--
-- Validates the filters object that kb.vector_search, kb.keyword_search, kb.hybrid_search and the
-- catalogue and graph functions accept, and returns its parts as typed values that they bind as
-- parameters (they are never pasted into SQL text). Valid keys:
--   category     a string, or an array of strings (any of them): documents.category = ANY(...)
--   metadata     an object: documents.metadata @> metadata (JSONB containment)
--   source       a LIKE pattern on documents.source_uri, e.g. '%/sql-%' ('%' any text, '_' one char)
--   collections  a string, or an array of strings: documents.collection = ANY(...)
-- NULL or '{}' means no filter. collections is always the caller's scope, whatever was asked:
-- kb.collection_scope of the requested names (NULL = every collection and the caller may read
-- them all; otherwise the readable ones, or the requested ones after checking each is readable),
-- so every function applying `d.collection = ANY (f.collections)` stays within the caller's
-- grants. An unknown key, or a value of the wrong JSON type, raises PK001 (invalid argument)
-- naming the key and listing the valid keys; an unreadable collection raises as
-- kb.collection_scope does. STABLE (the scope depends on the session's role).
CREATE OR REPLACE FUNCTION kb.search_filters(
    filters jsonb,
    OUT category text[],
    OUT metadata jsonb,
    OUT source_pattern text,
    OUT collections text[])
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key text;
    value jsonb;
    requested text[];
BEGIN
    IF filters IS NULL OR filters = 'null'::jsonb THEN
        collections := kb.collection_scope(NULL);
        RETURN;
    END IF;
    IF jsonb_typeof(filters) <> 'object' THEN
        RAISE EXCEPTION 'filters must be a JSON object, got %', jsonb_typeof(filters)
            USING ERRCODE = 'PK001',
                  HINT = 'valid keys: category, metadata, source, collections';
    END IF;
    FOR key, value IN SELECT f.key, f.value FROM jsonb_each(filters) AS f LOOP
        CASE key
        WHEN 'category' THEN
            IF jsonb_typeof(value) = 'string' THEN
                category := ARRAY[value #>> '{}'];
            ELSIF jsonb_typeof(value) = 'array'
                  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(value) AS e
                                   WHERE jsonb_typeof(e) <> 'string') THEN
                category := ARRAY(SELECT jsonb_array_elements_text(value));
            ELSE
                RAISE EXCEPTION 'filter "category" must be a string or an array of strings, got %',
                    value
                    USING ERRCODE = 'PK001';
            END IF;
        WHEN 'metadata' THEN
            IF jsonb_typeof(value) <> 'object' THEN
                RAISE EXCEPTION 'filter "metadata" must be a JSON object (matched by containment), got %',
                    value
                    USING ERRCODE = 'PK001';
            END IF;
            metadata := value;
        WHEN 'source' THEN
            IF jsonb_typeof(value) <> 'string' THEN
                RAISE EXCEPTION 'filter "source" must be a string (a LIKE pattern on source_uri), got %',
                    value
                    USING ERRCODE = 'PK001';
            END IF;
            source_pattern := value #>> '{}';
        WHEN 'collections' THEN
            IF jsonb_typeof(value) = 'string' THEN
                requested := ARRAY[value #>> '{}'];
            ELSIF jsonb_typeof(value) = 'array'
                  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(value) AS e
                                   WHERE jsonb_typeof(e) <> 'string') THEN
                requested := ARRAY(SELECT jsonb_array_elements_text(value));
            ELSE
                RAISE EXCEPTION 'filter "collections" must be a string or an array of strings, got %',
                    value
                    USING ERRCODE = 'PK001';
            END IF;
        ELSE
            RAISE EXCEPTION 'unknown filter key "%"; valid keys are: category, metadata, source, collections', key
                USING ERRCODE = 'PK001',
                      HINT = 'category: string or array of strings; metadata: object (containment); '
                             'source: LIKE pattern on source_uri; collections: string or array of strings';
        END CASE;
    END LOOP;
    collections := kb.collection_scope(requested);
END;
$$;

COMMENT ON FUNCTION kb.search_filters(jsonb) IS
'Validates a search filters object (keys: category, metadata, source, collections) and returns its typed parts, collections being the caller''s scope (kb.collection_scope; NULL = no restriction); unknown keys raise an error listing the valid ones.';
