-- kb.search_filters(filters jsonb) -> (category text[], metadata jsonb, source_pattern text)
--
-- Validates the filters object that kb.vector_search, kb.keyword_search and kb.hybrid_search
-- accept, and returns its parts as typed values that the searches bind as parameters (they are
-- never pasted into SQL text). Valid keys:
--   category   a string, or an array of strings (any of them): documents.category = ANY(...)
--   metadata   an object: documents.metadata @> metadata (JSONB containment)
--   source     a LIKE pattern on documents.source_uri, e.g. '%/sql-%' ('%' any text, '_' one char)
-- NULL or '{}' means no filter (all parts NULL). An unknown key, or a value of the wrong JSON
-- type, raises invalid_parameter_value naming the key and listing the valid keys.
CREATE OR REPLACE FUNCTION kb.search_filters(
    filters jsonb,
    OUT category text[],
    OUT metadata jsonb,
    OUT source_pattern text)
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = kb, public, pg_temp
AS $$
DECLARE
    key text;
    value jsonb;
BEGIN
    IF filters IS NULL OR filters = 'null'::jsonb THEN
        RETURN;
    END IF;
    IF jsonb_typeof(filters) <> 'object' THEN
        RAISE EXCEPTION 'filters must be a JSON object, got %', jsonb_typeof(filters)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'valid keys: category, metadata, source';
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
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        WHEN 'metadata' THEN
            IF jsonb_typeof(value) <> 'object' THEN
                RAISE EXCEPTION 'filter "metadata" must be a JSON object (matched by containment), got %',
                    value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            metadata := value;
        WHEN 'source' THEN
            IF jsonb_typeof(value) <> 'string' THEN
                RAISE EXCEPTION 'filter "source" must be a string (a LIKE pattern on source_uri), got %',
                    value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            source_pattern := value #>> '{}';
        ELSE
            RAISE EXCEPTION 'unknown filter key "%"; valid keys are: category, metadata, source', key
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'category: string or array of strings; metadata: object (containment); '
                             'source: LIKE pattern on source_uri';
        END CASE;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION kb.search_filters(jsonb) IS
'Validates a search filters object (keys: category, metadata, source) and returns its typed parts; unknown keys raise an error listing the valid ones.';
