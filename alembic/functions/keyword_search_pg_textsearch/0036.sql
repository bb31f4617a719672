-- kb.keyword_search_pg_textsearch(query_text text, match_count integer DEFAULT 20,
--                                 filters jsonb DEFAULT '{}', document_ids uuid[] DEFAULT NULL)
--   -> TABLE (chunk_id, document_id, title, source_uri, chunk_index, heading_path, content,
--             rank integer, score double precision, strict_match boolean)
--
-- The keyword retriever on the pg_textsearch backend: kb.keyword_search calls it (with its
-- defaults: BM25, k1 0.9, b 0.75, heading weight 1) when kb.keyword_backend says
-- 'pg_textsearch'. The same rows, ranks and rules as kb.keyword_search; the BM25 scores come
-- from pg_textsearch's bm25 index of each collection (kb.keyword_index_name: a partial index on
-- kb.chunks WHERE collection = <name>, over heading_path || ' ' || content, english, k1 0.9,
-- b 0.75), so each collection's scores use its own statistics (chunk count, average length,
-- document frequencies), never another collection's. Candidates:
--   a. no category, metadata, source filter nor document_ids: each collection read's top
--      chunks from its index (Block-Max WAND top-k, each scored by the index scan: match_count
--      of them, ten times as many up to 1,000 when the text negates words). When chunks rank
--      above others whatever their score (a "quoted part" is required; strict matches first
--      when the text asks for exact matching, kb.search_query's strict_first; chunks holding
--      the text's identifiers, work_mem, pg_hba, next), the top-k is ten times match_count (up
--      to 1,000) and every chunk outside it scores lower than each chunk in it: a kind's
--      other chunks are read only when fewer than match_count of those in it rank above them,
--      scored from their text through the GIN index on tsv: up to 1,000 holding the quoted
--      parts; up to 1,000 matching the strict query; up to 1,000 that may hold the identifiers
--      (each as a phrase of its words or as the text's word holding it is parsed: pg_hba.conf
--      is one file token), those holding each as a whole word;
--   b. a category, metadata or source filter, or document_ids: the chunks that hold the quoted
--      parts (or, without one, any positive lexeme), pass the filters and belong to the
--      documents, through the GIN index, each scored by its collection's index (exact; work
--      bounded by what the filters leave).
-- Then, as kb.keyword_search: chunks holding a -negated word are dropped, only chunks holding
-- every quoted part (as phrases) and every quoted identifier as a whole word are kept, and the
-- order is strict matches first (strict_first queries), then chunks holding every identifier as
-- a whole word, then BM25 score (pg_textsearch's, positive; a top-k candidate's is the one its
-- index scan computed, bm25_get_current_score(), not its text scored again), then chunk_id. The
-- words scored are the text's, without its -negated parts, tokenized by the index's
-- configuration, each lexeme once (a word is left out when its lexemes come from other
-- words, those of several lexemes first; two hyphenated words sharing a part, web-based and
-- classroom-based, or one repeating it, metal-on-metal, still give it twice): the SQL BM25
-- sums over the distinct lexemes, pg_textsearch would count a repeated word again. What differs from kb.keyword_search is the length: pg_textsearch
-- measures a chunk in words (stored quantized, exact below 40), the SQL BM25 in distinct
-- lexemes. Collections:
-- the filters' (kb.search_filters: the caller's scope); every collection when NULL. Raises PK040
-- when the extension or a collection's index is missing; otherwise never errors on any
-- query text. match_count is clamped to 1,000. Collections without chunks
-- (kb.collection_stats) are skipped. Sequential scans are off for the call (enable_seqscan):
-- the planner would otherwise read every chunk to score a small collection's few rows instead
-- of asking its index. Reads only (STABLE); owner only (EXECUTE through kb.keyword_search).
CREATE OR REPLACE FUNCTION kb.keyword_search_pg_textsearch(
    query_text text,
    match_count integer DEFAULT 20,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL)
RETURNS TABLE (
    chunk_id bigint,
    document_id uuid,
    title text,
    source_uri text,
    chunk_index integer,
    heading_path text,
    content text,
    rank integer,
    score double precision,
    strict_match boolean)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    q record;
    f record;
    ext text;
    coll text;
    idx text;
    words text;
    top_k integer;
    filtered boolean;
    gin_query tsquery;
    identifier_query tsquery;
    statement text;
    parts text[] := '{}';
    deep_k integer;
    ranked_ids bigint[] := '{}';
    ranked_scores double precision[] := '{}';
    ids bigint[];
    scores double precision[];
    n_kept bigint;
    n_strict bigint;
    n_exact bigint;
    n_both bigint;
    need_strict boolean;
    need_exact boolean;
    ranked_first boolean;
BEGIN
    f := kb.search_filters(filters);
    IF match_count IS NULL OR match_count < 1 THEN
        RETURN;
    END IF;
    match_count := least(match_count, 1000);
    q := kb.search_query(query_text);
    IF q.any_query IS NULL THEN
        RETURN;
    END IF;
    SELECT n.nspname INTO ext
      FROM pg_catalog.pg_extension e
      JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_textsearch';
    IF ext IS NULL THEN
        RAISE EXCEPTION 'keyword backend pg_textsearch: the extension is not installed in this database'
            USING ERRCODE = 'PK040',
                  HINT = 'run pgkb db upgrade on a server that loads pg_textsearch, or set keyword_backend to sql';
    END IF;
    -- the words scored: the text without its -negated words and phrases, each lexeme once:
    -- kb.keyword_search sums over the text's distinct lexemes, where pg_textsearch would count
    -- a repeated word again (its query-term frequency). A word is kept when it is the first to
    -- give one of its lexemes, words of several lexemes (non-teaching: 'non-teach', 'non',
    -- 'teach') looked at before the others, in the text's order: "teaching ... non-teaching"
    -- scores 'teach' once. (Two such words sharing a part, web-based and classroom-based,
    -- still give it twice: a word cannot be passed in part.) Bag of words: the order is free
    words := regexp_replace(left(query_text, 20000), '(^|\s)-("[^"]*"?|\S+)', ' ', 'g');
    SELECT coalesce(string_agg(k.w, ' ' ORDER BY k.n), '') INTO words
      FROM (SELECT t.n, t.w
              FROM (SELECT s.n, s.w, u.key,
                           min(u.key) OVER (PARTITION BY l.lexeme) AS first_key
                      FROM regexp_split_to_table(words, '\s+') WITH ORDINALITY AS s(w, n)
                     CROSS JOIN LATERAL (
                           SELECT tsvector_to_array(to_tsvector('english'::regconfig, s.w)) AS lexemes) v
                     CROSS JOIN LATERAL (
                           SELECT CASE WHEN cardinality(v.lexemes) > 1 THEN s.n
                                       ELSE s.n + 1000000 END AS key) u
                     CROSS JOIN LATERAL unnest(v.lexemes) AS l(lexeme)) t
             WHERE t.key = t.first_key
             GROUP BY t.n, t.w) k;
    filtered := f.category IS NOT NULL OR f.metadata IS NOT NULL OR f.source_pattern IS NOT NULL
                OR document_ids IS NOT NULL;
    ranked_first := q.required IS NOT NULL OR q.strict_first OR q.identifiers IS NOT NULL;
    top_k := CASE WHEN q.excluded IS NULL THEN match_count ELSE least(1000, 10 * match_count) END;
    gin_query := coalesce(q.required, q.any_query);
    -- the chunks that may hold every identifier as a word: for each, its words as a phrase or
    -- the text's word holding it as the parser reads that word (pg_hba.conf is one file token)
    IF NOT filtered AND q.required IS NULL AND q.identifiers IS NOT NULL THEN
        SELECT string_agg('(' || x.alternatives || ')', ' & ')::tsquery INTO identifier_query
          FROM (SELECT string_agg(DISTINCT v.p::text, ' | ') AS alternatives
                  FROM unnest(q.identifiers) AS i
                 CROSS JOIN LATERAL (
                       SELECT phraseto_tsquery('english'::regconfig, i) AS p
                       UNION
                       SELECT phraseto_tsquery('english'::regconfig, w)
                         FROM regexp_split_to_table(left(query_text, 20000), '\s+') AS w
                        WHERE w ~* ('\m' || i || '\M')) v
                 WHERE numnode(v.p) > 0
                 GROUP BY i) x;
    END IF;
    -- pg_textsearch's planner hook, which hands each top-k scan's scores over instead of
    -- computing them again, looks its accessor (bm25_get_current_score) up by name on the search
    -- path: the extension's schema goes there for this call, after pg_catalog (restored at the
    -- function's exit; every name of the statements is pg_catalog's or schema-qualified)
    PERFORM pg_catalog.set_config('search_path',
                                  'pg_catalog, ' || pg_catalog.quote_ident(ext) || ', pg_temp', true);
    -- the ranked depth when strict or identifier matches rank first: the best chunks by score
    -- among those matches are found there, scored by the index
    deep_k := least(1000, greatest(top_k, 10 * match_count));
    FOR coll IN
        SELECT c.name FROM kb.collections c
         WHERE (f.collections IS NULL OR c.name = ANY (f.collections))
           AND EXISTS (SELECT 1 FROM kb.collection_stats s
                        WHERE s.collection = c.name AND s.chunk_count > 0)
         ORDER BY c.name
    LOOP
        idx := kb.keyword_index_name(coll);
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class i
                         JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
                        WHERE i.relname = idx AND i.relnamespace = 'kb'::pg_catalog.regnamespace
                          AND x.indisvalid) THEN
            RAISE EXCEPTION 'keyword backend pg_textsearch: collection % has no valid bm25 index (kb.%)',
                quote_literal(coll), idx
                USING ERRCODE = 'PK040',
                      HINT = 'run pgkb db upgrade as the kb owner, or set keyword_backend to sql';
        END IF;
        -- $1 words, $2 the collection, $3 top_k, $4 GIN query, $5.. the filters; the index's
        -- name and the extension's schema are identifiers, quoted by format
        IF NOT filtered AND NOT ranked_first THEN
            -- the score the index scan computed (the expression in the select list would score
            -- every row again from its text: about 0.1 ms a row)
            parts := parts || format(
                '(SELECT c.id, %1$I.bm25_get_current_score() AS s'
                '   FROM kb.chunks c WHERE c.collection = %3$L'
                '  ORDER BY (c.heading_path || '' '' || c.content) OPERATOR(%1$I.<@>) %1$I.to_bm25query($1, %2$L)'
                '  LIMIT $3)',
                ext, 'kb.' || idx, coll);
        ELSIF NOT filtered THEN
            -- quoted parts are required, strict and identifier matches rank above the others
            -- whatever their score: the deep_k best chunks by score (scored by the index), and
            -- how many of them are kept (hold the quoted parts, no negated word), kept and
            -- strict (strict_first), kept and hold every identifier, kept and both. Every chunk
            -- not among them scores lower than each of them, so a kind's other chunks are
            -- needed only when fewer than match_count of those found rank above them; those
            -- are added below, scored from their text (about 0.1 ms a chunk)
            EXECUTE format(
                'SELECT coalesce(array_agg(t.id), ''{}''), coalesce(array_agg(t.s), ''{}''),'
                '       count(*) FILTER (WHERE k.kept), count(*) FILTER (WHERE k.kept AND k.strict),'
                '       count(*) FILTER (WHERE k.kept AND k.exact),'
                '       count(*) FILTER (WHERE k.kept AND k.strict AND k.exact)'
                '  FROM (SELECT c.id, %1$I.bm25_get_current_score() AS s'
                '          FROM kb.chunks c WHERE c.collection = %3$L'
                '         ORDER BY (c.heading_path || '' '' || c.content) OPERATOR(%1$I.<@>) %1$I.to_bm25query($1, %2$L)'
                '         LIMIT $2) t'
                '  JOIN kb.chunks c ON c.id = t.id'
                ' CROSS JOIN LATERAL ('
                '       SELECT ($3::tsquery IS NULL OR c.tsv @@ $3) AND ($4::tsquery IS NULL OR NOT c.tsv @@ $4)'
                '              AND NOT EXISTS (SELECT 1 FROM unnest($8::text[]) AS i'
                '                               WHERE NOT (c.heading_path || '' '' || c.content) ~* (''\m'' || i || ''\M'')) AS kept,'
                '              (NOT $5 OR c.tsv @@ $6) AS strict,'
                '              NOT EXISTS (SELECT 1 FROM unnest($7::text[]) AS i'
                '                           WHERE NOT (c.heading_path || '' '' || c.content) ~* (''\m'' || i || ''\M'')) AS exact) k',
                ext, 'kb.' || idx, coll)
               INTO ids, scores, n_kept, n_strict, n_exact, n_both
              USING words, deep_k, q.required, q.excluded, q.strict_first, q.strict_query,
                    q.identifiers, q.required_words;
            ranked_ids := ranked_ids || ids;
            ranked_scores := ranked_scores || scores;
            -- the kinds whose other chunks may rank among the first match_count: strict matches
            -- (each outranked by the strict ones found), identifier matches that are not strict
            -- (by the strict and the identifier ones found) or are (by both found, when the
            -- strict matches are not all added), the others (by every one kept)
            need_strict := q.strict_first AND n_strict < match_count;
            need_exact := q.identifiers IS NOT NULL
                          AND CASE WHEN q.strict_first
                                   THEN n_strict + n_exact - n_both < match_count
                                        OR (NOT need_strict AND n_both < match_count)
                                   ELSE n_exact < match_count END;
            IF q.required IS NOT NULL AND (need_strict OR need_exact OR n_kept < match_count) THEN
                -- up to 1,000 other chunks holding the quoted parts
                parts := parts || format(
                    '(SELECT c.id, (c.heading_path || '' '' || c.content) OPERATOR(%1$I.<@>) %1$I.to_bm25query($1, %2$L) AS s'
                    '   FROM kb.chunks c WHERE c.collection = %3$L AND c.tsv @@ $14 AND c.id <> ALL ($18)'
                    '  LIMIT 1000)',
                    ext, 'kb.' || idx, coll);
            ELSIF q.required IS NULL THEN
                IF need_exact THEN
                    -- up to 1,000 other chunks that may hold the identifiers (identifier_query,
                    -- through the GIN index on tsv), those holding each as a whole word scored
                    parts := parts || format(
                        '(SELECT c.id, (c.heading_path || '' '' || c.content) OPERATOR(%1$I.<@>) %1$I.to_bm25query($1, %2$L) AS s'
                        '   FROM (SELECT c.id, c.heading_path, c.content FROM kb.chunks c'
                        '          WHERE c.collection = %3$L AND c.tsv @@ $17 AND c.id <> ALL ($18) LIMIT 1000) c'
                        '  WHERE NOT EXISTS (SELECT 1 FROM unnest($12::text[]) AS i'
                        '                     WHERE NOT (c.heading_path || '' '' || c.content) ~* (''\m'' || i || ''\M'')))',
                        ext, 'kb.' || idx, coll);
                END IF;
                IF need_strict THEN
                    -- up to 1,000 other chunks matching the strict query
                    parts := parts || format(
                        '(SELECT c.id, (c.heading_path || '' '' || c.content) OPERATOR(%1$I.<@>) %1$I.to_bm25query($1, %2$L) AS s'
                        '   FROM kb.chunks c WHERE c.collection = %3$L AND c.tsv @@ $9'
                        '    AND c.id <> ALL ($18) LIMIT 1000)',
                        ext, 'kb.' || idx, coll);
                END IF;
            END IF;
        END IF;
        IF filtered THEN
            parts := parts || format(
                '(SELECT c.id, (c.heading_path || '' '' || c.content) OPERATOR(%1$I.<@>) %1$I.to_bm25query($1, %2$L) AS s'
                '   FROM kb.chunks c'
                '  WHERE c.collection = %3$L AND c.tsv @@ $4'
                '    AND ($5::uuid[] IS NULL OR c.document_id = ANY ($5))'
                '    AND ($6::text[] IS NULL AND $7::jsonb IS NULL AND $8::text IS NULL OR EXISTS ('
                '          SELECT 1 FROM kb.documents d WHERE d.id = c.document_id'
                '             AND ($6::text[] IS NULL OR d.category = ANY ($6))'
                '             AND ($7::jsonb IS NULL OR d.metadata @> $7)'
                '             AND ($8::text IS NULL OR d.source_uri LIKE $8))))',
                ext, 'kb.' || idx, coll);
        END IF;
    END LOOP;
    IF cardinality(ranked_ids) > 0 THEN
        parts := parts || '(SELECT unnest($18::bigint[]) AS id, unnest($19::double precision[]) AS s)'::text;
    END IF;
    IF cardinality(parts) = 0 THEN
        RETURN;
    END IF;
    -- nested subqueries, not WITH: pg_textsearch's planner hook, which lets an index scan hand
    -- over the scores it computed, does not look into a CTE that is not inlined (and a volatile
    -- bm25_get_current_score() keeps a CTE from being inlined)
    statement := format(
        'SELECT c.id, c.document_id, d.title, d.source_uri, c.chunk_index, c.heading_path, c.content,'
        '       r.rank, r.score, coalesce(c.tsv @@ $11, false)'
        '  FROM (SELECT s.id, s.score,'
        '               row_number() OVER (ORDER BY s.strict DESC, s.exact DESC, s.score DESC, s.id)::integer AS rank'
        '          FROM (SELECT y.id, y.score,'
        '                       ($10 AND c.tsv @@ $11) AS strict,'
        '                       ($12::text[] IS NOT NULL AND NOT EXISTS ('
        '                            SELECT 1 FROM unnest($12::text[]) AS i'
        '                             WHERE NOT (c.heading_path || '' '' || c.content) ~* (''\m'' || i || ''\M''))) AS exact'
        '                  FROM (SELECT DISTINCT ON (u.id) u.id, -u.s AS score FROM (%s) u ORDER BY u.id) y'
        '                  JOIN kb.chunks c ON c.id = y.id'
        '                 WHERE y.score > 0'
        '                   AND ($13::tsquery IS NULL OR NOT c.tsv @@ $13)'
        '                   AND ($14::tsquery IS NULL OR c.tsv @@ $14)'
        '                   AND ($15::text[] IS NULL OR NOT EXISTS ('
        '                            SELECT 1 FROM unnest($15::text[]) AS i'
        '                             WHERE NOT (c.heading_path || '' '' || c.content) ~* (''\m'' || i || ''\M'')))) s'
        '         ORDER BY s.strict DESC, s.exact DESC, s.score DESC, s.id LIMIT $16) r'
        '  JOIN kb.chunks c ON c.id = r.id JOIN kb.documents d ON d.id = c.document_id'
        ' ORDER BY r.rank',
        array_to_string(parts, ' UNION ALL '));
    RETURN QUERY EXECUTE statement
        USING words, NULL::text, top_k, gin_query, document_ids, f.category, f.metadata,
              f.source_pattern, q.strict_query, q.strict_first, q.strict_query, q.identifiers,
              q.excluded, q.required, q.required_words, match_count,
              identifier_query, ranked_ids, ranked_scores;
END;
$$;

COMMENT ON FUNCTION kb.keyword_search_pg_textsearch(text, integer, jsonb, uuid[]) IS
'Keyword retriever on pg_textsearch''s bm25 index of each collection (own statistics per collection): each query lexeme once (as the SQL BM25; the length is pg_textsearch''s, in words); top-k per collection (ten times deeper when quoted parts, strict or identifier matches rank first, their other chunks read through GIN only when the top-k holds too few), or GIN candidates scored by the index with filters or document_ids; then kb.keyword_search''s rules (negation, quoted parts required, strict and identifier matches first, score, chunk_id). Maxima: match_count 1000.';

REVOKE ALL ON FUNCTION kb.keyword_search_pg_textsearch(text, integer, jsonb, uuid[]) FROM PUBLIC;
