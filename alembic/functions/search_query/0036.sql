-- kb.search_query(query_text text)
--   -> (strict_query tsquery, any_query tsquery, lexemes text[], excluded tsquery, negated text[],
--       identifiers text[], strict_first boolean, quoted text[], required tsquery,
--       required_words text[])
--
-- Parses a user's search text once, for kb.keyword_search. Never raises, whatever the text:
--   strict_query  websearch_to_tsquery('english', text): "quoted phrases" as phrases, -word as
--                 NOT, 'or' as OR, every other word ANDed (NULL when it has no lexeme);
--   any_query     the OR of the text's positive lexemes (natural-language questions rarely
--                 contain every one of their words), NULL when there is none;
--   lexemes       those lexemes, distinct, in order of first appearance, at most 64;
--   excluded      the OR of the lexemes the text negates with -word (NULL when none);
--   negated       those negated lexemes (at most 64);
--   identifiers   the words joined by underscores, as written (work_mem, pg_stat_activity), at
--                 most 16: the parser splits maintenance_work_mem into three lexemes, so
--                 kb.keyword_search matches them against the text itself to rank exact
--                 occurrences (work_mem, not maintenance_work_mem) first;
--   strict_first  true when the text asks for exact matching: a "quoted phrase", or a word that
--                 looks like an identifier (with '_', or with both letters and digits: 40P01,
--                 pg_dump); kb.keyword_search then ranks the strict_query matches first.
--                 Natural-language questions without either are ranked by score alone;
--   quoted        the "quoted parts" of the text as written, not the negated ones (-"...")
--                 (at most 16; a quote left open runs to the end of the text), NULL when there
--                 is none;
--   required      the AND of the quoted parts as websearch_to_tsquery reads them (each a
--                 phrase), NULL when no quoted part has a lexeme (only stop words or
--                 punctuation): kb.keyword_search returns only chunks matching it;
--   required_words the identifier-like words of the quoted parts, as written (at most 16):
--                 kb.keyword_search returns only chunks holding each as a whole word, so
--                 "work_mem" does not match maintenance_work_mem.
-- The text is cut to its first 20,000 characters (a query is not a document), and a run of two
-- or more dashes (with or without spaces between them) is read as a space.
CREATE OR REPLACE FUNCTION kb.search_query(
    query_text text,
    OUT strict_query tsquery,
    OUT any_query tsquery,
    OUT lexemes text[],
    OUT excluded tsquery,
    OUT negated text[],
    OUT identifiers text[],
    OUT strict_first boolean,
    OUT quoted text[],
    OUT required tsquery,
    OUT required_words text[])
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
    given text := left(coalesce(query_text, ''), 20000);
    cleaned text;
BEGIN
    -- a run of dashes ("-----" under psql output, "- - -") would be read as that many nested
    -- NOTs, and 32 of them overflow websearch_to_tsquery's stack ("tsquery stack too small"):
    -- a run of two or more becomes a space (as many NOTs cancel out or negate nothing). Each
    -- regular expression below runs only when the text holds a character it looks for.
    cleaned := CASE WHEN position('-' IN given) > 0
                    THEN regexp_replace(given, '-[-[:space:]]*-', ' ', 'g') ELSE given END;
    strict_query := websearch_to_tsquery('english'::regconfig, cleaned);
    strict_first := false;
    IF given ~ '[0-9_]' THEN  -- an identifier-like word has a digit or an underscore
        SELECT (array_agg(w.word ORDER BY w.first_seen) FILTER (WHERE w.word ~ '[A-Za-z0-9]_[A-Za-z0-9]'))[1:16],
               coalesce(bool_or(true), false)
          INTO identifiers, strict_first
          FROM (SELECT m[1] AS word, min(n) AS first_seen
                  FROM regexp_matches(given, '[A-Za-z0-9_]+', 'g') WITH ORDINALITY AS r(m, n)
                 WHERE length(m[1]) BETWEEN 2 AND 100
                   AND (m[1] ~ '[A-Za-z0-9]_[A-Za-z0-9]' OR (m[1] ~ '[0-9]' AND m[1] ~ '[A-Za-z]'))
                 GROUP BY m[1]) w;
    END IF;
    -- the quoted parts: each a requirement (its phrase, and its identifiers as written)
    IF position('"' IN given) > 0 THEN
        strict_first := true;
        SELECT (array_agg(m.part ORDER BY m.n))[1:16]
          INTO quoted
          FROM (SELECT r.m[2] AS part, r.n
                  FROM regexp_matches(cleaned, '(-?)"([^"]*)("|$)', 'g') WITH ORDINALITY AS r(m, n)
                 WHERE r.m[1] = '' AND btrim(r.m[2]) <> '') m;
    END IF;
    IF quoted IS NOT NULL THEN
        required := websearch_to_tsquery(
            'english'::regconfig,
            (SELECT string_agg('"' || p || '"', ' ') FROM unnest(quoted) AS p));
        IF numnode(required) = 0 THEN
            required := NULL;
        END IF;
        SELECT (array_agg(DISTINCT w.m[1]))[1:16]
          INTO required_words
          FROM unnest(quoted) AS p,
               regexp_matches(p, '[A-Za-z0-9_]+', 'g') AS w(m)
         WHERE length(w.m[1]) BETWEEN 2 AND 100
           AND (w.m[1] ~ '[A-Za-z0-9]_[A-Za-z0-9]' OR (w.m[1] ~ '[0-9]' AND w.m[1] ~ '[A-Za-z]'));
    END IF;
    IF strict_query IS NULL OR numnode(strict_query) = 0 THEN
        strict_query := NULL;
        RETURN;
    END IF;
    -- the lexemes of the parsed query, each marked when preceded by the NOT operator
    SELECT array_agg(t.lexeme ORDER BY t.first_seen) FILTER (WHERE NOT t.is_negated),
           array_agg(t.lexeme ORDER BY t.first_seen) FILTER (WHERE t.is_negated)
      INTO lexemes, negated
      FROM (SELECT replace(m.parts[2], '''''', '''') AS lexeme,
                   bool_and(m.parts[1] = '!') AS is_negated,
                   min(m.n) AS first_seen
              FROM regexp_matches(strict_query::text, '(!?)''((?:[^'']|'''')+)''', 'g')
                   WITH ORDINALITY AS m(parts, n)
             GROUP BY 1) t;
    lexemes := lexemes[1:64];
    negated := negated[1:64];
    IF lexemes IS NOT NULL THEN
        any_query := (SELECT string_agg(
                                 '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
                        FROM unnest(lexemes) AS l)::tsquery;
    END IF;
    IF negated IS NOT NULL THEN
        excluded := (SELECT string_agg(
                                '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')
                       FROM unnest(negated) AS l)::tsquery;
    END IF;
END;
$$;

COMMENT ON FUNCTION kb.search_query(text) IS
'Parses search text (never raises; a run of dashes reads as a space): websearch_to_tsquery strict query, OR-of-lexemes query, the positive lexemes (max 64), the negated ones as a query and an array, underscore identifiers as written, whether strict matches go first, and the quoted parts with what they require (their phrases, their identifiers as whole words).';
