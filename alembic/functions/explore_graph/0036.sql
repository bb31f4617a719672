-- kb.explore_graph(start_document uuid DEFAULT NULL, query_text text DEFAULT NULL,
--                  max_depth integer DEFAULT 1, relation_types text[] DEFAULT NULL,
--                  filters jsonb DEFAULT '{}', document_ids uuid[] DEFAULT NULL,
--                  max_results integer DEFAULT 50)
--   -> TABLE (document_id uuid, title text, source_uri text, category text, doc_type text,
--             summary text, key_entities text[], distance integer, path jsonb, edges jsonb)
--
-- Walks the document graph (kb.document_relations), in one of three modes:
--   start_document given: the start (distance 0) and every document reached from it in 1 to
--     max_depth hops (breadth first, edges followed in both directions), each once, at its
--     shortest distance; path is the array of edges {source_id, target_id, relation_type,
--     origin} from the start to it (of several shortest paths, the first by edge order).
--   query_text given: the documents whose chunks best match it (kb.keyword_search, up to 10
--     documents, distance 0, path []) and their neighbours one hop away (distance 1).
--   neither: the catalogue: up to max_results documents, the most connected first (distance and
--     path NULL).
-- relation_types limits the edges followed (NULL = all five types). Every document returned,
-- and every document a path passes through, satisfies filters (kb.search_filters: category,
-- metadata, source, collections: at most the caller's collections) and document_ids, so a caller scoped to one category never sees another
-- category's documents, not even inside a path. edges lists, for each row, its outgoing edges
-- to the other documents returned ({target_id, relation_type, origin}, in target order): the
-- catalogue with the edges among its documents. Rows are ordered by distance, title,
-- document_id and limited to max_results (1..500). Cycles never loop (each document is visited
-- once). The walk stops at the hop where max_results documents are reached (farther ones could
-- not be returned), so a dense graph is not collected whole. Raises PK001 (invalid argument) for max_depth NULL or outside 1..3, max_results outside
-- 1..500, an unknown or empty list of relation types, both start_document and query_text, or a
-- bad filters object. An unknown or filtered-out start document returns no rows. Reads only
-- (STABLE, no temporary tables), so it runs on hot standbys.
CREATE OR REPLACE FUNCTION kb.explore_graph(
    start_document uuid DEFAULT NULL,
    query_text text DEFAULT NULL,
    max_depth integer DEFAULT 1,
    relation_types text[] DEFAULT NULL,
    filters jsonb DEFAULT '{}'::jsonb,
    document_ids uuid[] DEFAULT NULL,
    max_results integer DEFAULT 50)
RETURNS TABLE (
    document_id uuid,
    title text,
    source_uri text,
    category text,
    doc_type text,
    summary text,
    key_entities text[],
    distance integer,
    path jsonb,
    edges jsonb)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- a plan for the arguments of each call: the generic plan PL/pgSQL switches to after five calls
-- cannot tell which of the optional filters are given, and walked 10x slower
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    f record;
    valid_types constant text[] := ARRAY['references', 'supersedes', 'supplements', 'contradicts',
                                         'depicts'];
    types text[];
    bad text;
    seen_ids uuid[] := '{}';
    seen_dist integer[] := '{}';
    seen_paths jsonb[] := '{}';
    frontier_ids uuid[];
    frontier_paths jsonb[];
    next_ids uuid[];
    next_paths jsonb[];
    hop integer;
BEGIN
    IF max_depth IS NULL OR max_depth < 1 OR max_depth > 3 THEN
        RAISE EXCEPTION 'max_depth must be between 1 and 3, got %', coalesce(max_depth::text, 'NULL')
            USING ERRCODE = 'PK001',
                  HINT = 'the graph is walked at most 3 hops from the start document';
    END IF;
    IF max_results IS NULL OR max_results < 1 OR max_results > 500 THEN
        RAISE EXCEPTION 'max_results must be between 1 and 500, got %',
            coalesce(max_results::text, 'NULL')
            USING ERRCODE = 'PK001';
    END IF;
    IF relation_types IS NOT NULL THEN
        IF pg_catalog.cardinality(relation_types) = 0 THEN
            RAISE EXCEPTION 'relation_types is empty; give NULL for all types or some of: %',
                pg_catalog.array_to_string(valid_types, ', ')
                USING ERRCODE = 'PK001';
        END IF;
        SELECT t INTO bad FROM pg_catalog.unnest(relation_types) AS t
         WHERE t IS NULL OR NOT (t = ANY (valid_types)) LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'unknown relation type %; valid types are: %',
                coalesce(pg_catalog.quote_literal(bad), 'NULL'),
                pg_catalog.array_to_string(valid_types, ', ')
                USING ERRCODE = 'PK001';
        END IF;
    END IF;
    types := coalesce(relation_types, valid_types);
    IF start_document IS NOT NULL AND query_text IS NOT NULL THEN
        RAISE EXCEPTION 'give start_document or query_text, not both'
            USING ERRCODE = 'PK001',
                  HINT = 'neither returns the catalogue of documents';
    END IF;
    f := kb.search_filters(filters);

    IF start_document IS NOT NULL THEN
        -- breadth first: each level's new documents, reached through allowed documents only
        IF NOT EXISTS (
            SELECT 1 FROM kb.documents d
             WHERE d.id = start_document
               AND (document_ids IS NULL OR d.id = ANY (document_ids))
               AND (f.category IS NULL OR d.category = ANY (f.category))
               AND (f.metadata IS NULL OR d.metadata @> f.metadata)
               AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
               AND (f.collections IS NULL OR d.collection = ANY (f.collections))) THEN
            RETURN;
        END IF;
        seen_ids := ARRAY[start_document];
        seen_dist := ARRAY[0];
        seen_paths := ARRAY['[]'::jsonb];
        frontier_ids := seen_ids;
        frontier_paths := seen_paths;
        FOR hop IN 1..max_depth LOOP
            -- the result keeps the max_results nearest documents (by distance first): once that
            -- many are reached, a farther hop cannot add one, so the walk stops there instead of
            -- collecting the whole component
            EXIT WHEN pg_catalog.cardinality(seen_ids) >= max_results;
            SELECT pg_catalog.array_agg(s.neighbor ORDER BY s.neighbor),
                   pg_catalog.array_agg(s.path ORDER BY s.neighbor)
              INTO next_ids, next_paths
              FROM (SELECT DISTINCT ON (x.neighbor) x.neighbor, x.path
                      FROM (SELECT CASE WHEN r.source_id = fr.id THEN r.target_id ELSE r.source_id END
                                       AS neighbor,
                                   fr.path || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                                       'source_id', r.source_id, 'target_id', r.target_id,
                                       'relation_type', r.relation_type, 'origin', r.origin)) AS path,
                                   fr.ord, r.source_id AS s_id, r.target_id AS t_id, r.relation_type AS rt
                              FROM ROWS FROM (pg_catalog.unnest(frontier_ids), pg_catalog.unnest(frontier_paths))
                                       WITH ORDINALITY AS fr(id, path, ord)
                              JOIN kb.document_relations r
                                ON (r.source_id = fr.id OR r.target_id = fr.id)
                               AND r.relation_type = ANY (types)) x
                      JOIN kb.documents d ON d.id = x.neighbor
                     WHERE NOT (x.neighbor = ANY (seen_ids))
                       AND (document_ids IS NULL OR d.id = ANY (document_ids))
                       AND (f.category IS NULL OR d.category = ANY (f.category))
                       AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                       AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
                       AND (f.collections IS NULL OR d.collection = ANY (f.collections))
                     ORDER BY x.neighbor, x.ord, x.s_id, x.t_id, x.rt) s;
            EXIT WHEN next_ids IS NULL;
            seen_ids := seen_ids || next_ids;
            seen_dist := seen_dist || pg_catalog.array_fill(hop, ARRAY[pg_catalog.cardinality(next_ids)]);
            seen_paths := seen_paths || next_paths;
            frontier_ids := next_ids;
            frontier_paths := next_paths;
        END LOOP;
    ELSIF query_text IS NOT NULL THEN
        -- the best-matching documents (distance 0) and their neighbours (distance 1)
        SELECT pg_catalog.array_agg(m.document_id ORDER BY m.best, m.document_id)
          INTO seen_ids
          FROM (SELECT k.document_id, min(k.rank) AS best
                  FROM kb.keyword_search(query_text, 50, filters, document_ids) AS k
                 GROUP BY k.document_id
                 ORDER BY min(k.rank), k.document_id
                 LIMIT 10) m;
        IF seen_ids IS NULL THEN
            RETURN;
        END IF;
        seen_dist := pg_catalog.array_fill(0, ARRAY[pg_catalog.cardinality(seen_ids)]);
        seen_paths := pg_catalog.array_fill('[]'::jsonb, ARRAY[pg_catalog.cardinality(seen_ids)]);
        SELECT pg_catalog.array_agg(s.neighbor ORDER BY s.neighbor),
               pg_catalog.array_agg(s.path ORDER BY s.neighbor)
          INTO next_ids, next_paths
          FROM (SELECT DISTINCT ON (x.neighbor) x.neighbor, x.path
                  FROM (SELECT CASE WHEN r.source_id = fr.id THEN r.target_id ELSE r.source_id END
                                   AS neighbor,
                               pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                                   'source_id', r.source_id, 'target_id', r.target_id,
                                   'relation_type', r.relation_type, 'origin', r.origin)) AS path,
                               fr.ord, r.source_id AS s_id, r.target_id AS t_id, r.relation_type AS rt
                          FROM pg_catalog.unnest(seen_ids) WITH ORDINALITY AS fr(id, ord)
                          JOIN kb.document_relations r
                            ON (r.source_id = fr.id OR r.target_id = fr.id)
                           AND r.relation_type = ANY (types)) x
                  JOIN kb.documents d ON d.id = x.neighbor
                 WHERE NOT (x.neighbor = ANY (seen_ids))
                   AND (document_ids IS NULL OR d.id = ANY (document_ids))
                   AND (f.category IS NULL OR d.category = ANY (f.category))
                   AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                   AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
                   AND (f.collections IS NULL OR d.collection = ANY (f.collections))
                 ORDER BY x.neighbor, x.ord, x.s_id, x.t_id, x.rt) s;
        IF next_ids IS NOT NULL THEN
            seen_ids := seen_ids || next_ids;
            seen_dist := seen_dist || pg_catalog.array_fill(1, ARRAY[pg_catalog.cardinality(next_ids)]);
            seen_paths := seen_paths || next_paths;
        END IF;
    ELSE
        -- the catalogue: the most connected documents first
        SELECT pg_catalog.array_agg(c.id ORDER BY c.degree DESC, c.title, c.id)
          INTO seen_ids
          FROM (SELECT d.id, d.title,
                       (SELECT count(*) FROM kb.document_relations r
                         WHERE (r.source_id = d.id OR r.target_id = d.id)
                           AND r.relation_type = ANY (types)) AS degree
                  FROM kb.documents d
                 WHERE (document_ids IS NULL OR d.id = ANY (document_ids))
                   AND (f.category IS NULL OR d.category = ANY (f.category))
                   AND (f.metadata IS NULL OR d.metadata @> f.metadata)
                   AND (f.source_pattern IS NULL OR d.source_uri LIKE f.source_pattern)
                   AND (f.collections IS NULL OR d.collection = ANY (f.collections))
                 ORDER BY degree DESC, d.title, d.id
                 LIMIT max_results) c;
        IF seen_ids IS NULL THEN
            RETURN;
        END IF;
        seen_dist := pg_catalog.array_fill(NULL::integer, ARRAY[pg_catalog.cardinality(seen_ids)]);
        seen_paths := pg_catalog.array_fill(NULL::jsonb, ARRAY[pg_catalog.cardinality(seen_ids)]);
    END IF;

    RETURN QUERY
    WITH reached AS (
        SELECT s.id, s.dist, s.path, s.ord
          FROM ROWS FROM (pg_catalog.unnest(seen_ids), pg_catalog.unnest(seen_dist),
                         pg_catalog.unnest(seen_paths)) WITH ORDINALITY AS s(id, dist, path, ord)
    ),
    kept AS (
        SELECT r.id, r.dist, r.path, d.title, d.source_uri, d.category, d.doc_type, d.summary,
               d.key_entities
          FROM reached r
          JOIN kb.documents d ON d.id = r.id
         ORDER BY r.dist NULLS FIRST, CASE WHEN r.dist IS NULL THEN r.ord END, d.title, d.id
         LIMIT max_results
    )
    SELECT k.id, k.title, k.source_uri, k.category, k.doc_type, k.summary, k.key_entities,
           k.dist, k.path,
           coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                'target_id', e.target_id, 'relation_type', e.relation_type,
                                'origin', e.origin)
                            ORDER BY e.target_id, e.relation_type)
                       FROM kb.document_relations e
                      WHERE e.source_id = k.id
                        AND e.relation_type = ANY (types)
                        AND e.target_id IN (SELECT k2.id FROM kept k2)), '[]'::jsonb)
      FROM kept k
     ORDER BY k.dist NULLS FIRST, k.title, k.id;
END;
$$;

COMMENT ON FUNCTION kb.explore_graph(uuid, text, integer, text[], jsonb, uuid[], integer) IS
'Walks the document graph: from start_document 1..3 hops (undirected, each document once at its shortest distance, with the path of edges); or from query_text, the matching documents and their neighbours; or the catalogue of the most connected documents. Honours filters and document_ids; bounded by max_results.';

REVOKE ALL ON FUNCTION kb.explore_graph(uuid, text, integer, text[], jsonb, uuid[], integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.explore_graph(uuid, text, integer, text[], jsonb, uuid[], integer) TO kb_reader;
    END IF;
END
$$;
