-- kb.keyword_index_name(collection text) -> text
--
-- The name of a collection's pg_textsearch index on kb.chunks (the keyword backend
-- pg_textsearch): 'chunks_bm25_' || the collection's name lower-cased with every character
-- other than a-z, 0-9 and '_' replaced by '_' (its first 40 characters) || '_' || the first 8
-- hex digits of md5(name), so two names that read alike get two indexes and the name fits
-- PostgreSQL's 63 bytes. NULL for NULL. Never raises. Pure (IMMUTABLE).
CREATE OR REPLACE FUNCTION kb.keyword_index_name(collection text)
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'chunks_bm25_' || left(regexp_replace(lower(collection), '[^a-z0-9_]', '_', 'g'), 40)
           || '_' || left(md5(collection), 8);
$$;

COMMENT ON FUNCTION kb.keyword_index_name(text) IS
'Name of a collection''s pg_textsearch bm25 index on kb.chunks: chunks_bm25_<name, sanitized, 40 chars>_<8 hex digits of md5(name)>.';

REVOKE ALL ON FUNCTION kb.keyword_index_name(text) FROM PUBLIC;
