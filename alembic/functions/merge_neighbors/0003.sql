-- kb.merge_neighbors(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
--   -> TABLE (hit_chunk_id, document_id, title, source_uri, chunk_start, chunk_end, heading_path,
--             content, token_count)
--
-- A search hit with its neighbours merged into one passage: the chunks of
-- kb.neighbor_chunks(chunk_id, before, after) joined in document order. Where a chunk begins with
-- the text the previous one ended with (the chunker's overlap), that text appears once; otherwise
-- the chunks are joined by a blank line. chunk_start/chunk_end are the first and last
-- chunk_index merged, heading_path is the hit's, token_count is the sum over the merged chunks
-- (an upper bound when they overlap). One row, or none when the chunk does not exist.
-- before/after are clamped to 50 (kb.neighbor_chunks), and the overlap is looked for in the last
-- 4,000 characters of the text so far only, from where the chunk's first 20 characters occur:
-- the work grows linearly with the merged text.
CREATE OR REPLACE FUNCTION kb.merge_neighbors(chunk_id bigint, before integer DEFAULT 1, after integer DEFAULT 1)
RETURNS TABLE (
    hit_chunk_id bigint,
    document_id uuid,
    title text,
    source_uri text,
    chunk_start integer,
    chunk_end integer,
    heading_path text,
    content text,
    token_count integer)
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part record;
    merged text;
    overlap integer;
    k integer;
    hit_heading text;
    first_index integer;
    last_index integer;
    tokens integer := 0;
    doc uuid;
    tail text;
    probe text;
    pos integer;
    offset_ integer;
BEGIN
    FOR part IN SELECT * FROM kb.neighbor_chunks(merge_neighbors.chunk_id, least(before, 50),
                                                 least(after, 50)) LOOP
        IF merged IS NULL THEN
            merged := part.content;
            first_index := part.chunk_index;
        ELSE
            -- the longest suffix of the text so far that starts this chunk (at most 4,000
            -- chars). Suffixes of 20 chars or more can only start where the chunk's first 20
            -- chars occur in the tail (found with strpos, leftmost = longest); shorter ones are
            -- tried one by one.
            overlap := 0;
            tail := right(merged, least(4000, length(part.content)));
            probe := left(part.content, 20);
            IF length(probe) = 20 THEN
                offset_ := 0;
                LOOP
                    pos := strpos(substr(tail, offset_ + 1), probe);
                    EXIT WHEN pos = 0;
                    k := length(tail) - offset_ - pos + 1;
                    IF substr(tail, offset_ + pos) = left(part.content, k) THEN
                        overlap := k;
                        EXIT;
                    END IF;
                    offset_ := offset_ + pos;
                END LOOP;
            END IF;
            IF overlap = 0 THEN
                FOR k IN REVERSE least(length(tail), 19) .. 1 LOOP
                    IF right(tail, k) = left(part.content, k) THEN
                        overlap := k;
                        EXIT;
                    END IF;
                END LOOP;
            END IF;
            IF overlap > 0 THEN
                merged := merged || substr(part.content, overlap + 1);
            ELSE
                merged := merged || E'\n\n' || part.content;
            END IF;
        END IF;
        last_index := part.chunk_index;
        tokens := tokens + part.token_count;
        doc := part.document_id;
        IF part.is_hit THEN
            hit_heading := part.heading_path;
        END IF;
    END LOOP;
    IF merged IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT merge_neighbors.chunk_id, d.id, d.title, d.source_uri, first_index, last_index,
           hit_heading, merged, tokens
      FROM kb.documents d
     WHERE d.id = doc;
END;
$$;

COMMENT ON FUNCTION kb.merge_neighbors(bigint, integer, integer) IS
'A hit with its neighbouring chunks merged into one passage (overlap between consecutive chunks removed), with its chunk range, title and source. Maximum: before and after 50 (larger values act as 50).';

REVOKE ALL ON FUNCTION kb.merge_neighbors(bigint, integer, integer) FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        GRANT EXECUTE ON FUNCTION kb.merge_neighbors(bigint, integer, integer) TO kb_reader;
    END IF;
END
$$;
