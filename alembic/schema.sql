-- The schema of a pgkb knowledge base at head: what the migrations in alembic/versions/ add up
-- to. Read it to see every table, index, trigger, role and grant at once; the functions are in
-- sql_functions/, one file each. Generated from a freshly migrated database by
-- `python -m loader.devtools.schema URL` (pg_dump --schema-only, cleaned); never edit by hand:
-- change the schema with a new migration, then regenerate. tests/sql/test_schema_file.py fails when
-- the two differ.
-- pg_dump major version: 18

-- roles (cluster-wide; the migrations create them when they are missing)
CREATE ROLE kb_reader NOLOGIN;
CREATE ROLE kb_writer NOLOGIN;

-- schema: kb
CREATE SCHEMA kb;

-- extension: vector
CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public;

-- comment: EXTENSION vector
COMMENT ON EXTENSION vector IS 'vector data type and ivfflat and hnsw access methods';

-- table: document_jobs
CREATE TABLE kb.document_jobs (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    action text NOT NULL,
    collection text NOT NULL,
    source_uri text NOT NULL,
    title text,
    content text,
    data bytea,
    mime_type text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    category text,
    content_sha text NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    error text,
    submitted_by text DEFAULT SESSION_USER NOT NULL,
    submitted_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    run_after timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    lease_until timestamp with time zone,
    worker text,
    document_id uuid,
    CONSTRAINT document_jobs_action_check CHECK ((action = ANY (ARRAY['put'::text, 'remove'::text]))),
    CONSTRAINT document_jobs_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT document_jobs_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT document_jobs_source_uri_check CHECK (((btrim(source_uri) <> ''::text) AND (length(source_uri) <= 2000))),
    CONSTRAINT document_jobs_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'processing'::text, 'ready'::text, 'failed'::text])))
);

-- comment: TABLE document_jobs
COMMENT ON TABLE kb.document_jobs IS 'The write queue: one row per submitted document (put) or removal, with its state (pending, processing, ready, failed), attempts, error and times; written by kb.enqueue_document, taken by pgkb worker (kb.claim_document_job, kb.finish_document_job).';

-- table: alembic_version
CREATE TABLE kb.alembic_version (
    version_num character varying(32) NOT NULL
);

-- table: chunks
CREATE TABLE kb.chunks (
    id bigint NOT NULL,
    document_id uuid NOT NULL,
    chunk_index integer NOT NULL,
    heading_path text DEFAULT ''::text NOT NULL,
    content text NOT NULL,
    content_sha text NOT NULL,
    token_count integer NOT NULL,
    tsv tsvector GENERATED ALWAYS AS ((setweight(to_tsvector('english'::regconfig, heading_path), 'A'::"char") || setweight(to_tsvector('english'::regconfig, content), 'D'::"char"))) STORED,
    collection text,
    CONSTRAINT chunks_chunk_index_check CHECK ((chunk_index >= 0)),
    CONSTRAINT chunks_token_count_check CHECK ((token_count >= 0))
);
ALTER TABLE ONLY kb.chunks ALTER COLUMN tsv SET STORAGE MAIN;

-- comment: TABLE chunks
COMMENT ON TABLE kb.chunks IS 'Passages of a document in order (chunk_index); tsv indexes heading_path (weight A) and content (weight D).';

-- comment: COLUMN chunks.content_sha
COMMENT ON COLUMN kb.chunks.content_sha IS 'sha256 of the text given to the embedding model; equal text reuses its embedding.';

-- comment: COLUMN chunks.token_count
COMMENT ON COLUMN kb.chunks.token_count IS 'Length of the chunk in tokens of the embedding model''s tokenizer.';

-- comment: COLUMN chunks.collection
COMMENT ON COLUMN kb.chunks.collection IS 'The collection of the chunk''s document (set by a trigger, kept equal by the foreign key), for the per-collection keyword statistics.';

-- sequence: chunks_id_seq
ALTER TABLE kb.chunks ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME kb.chunks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- table: collection_grants
CREATE TABLE kb.collection_grants (
    role_name text NOT NULL,
    collection text,
    granted_at timestamp with time zone DEFAULT now() NOT NULL,
    can_write boolean DEFAULT false NOT NULL,
    CONSTRAINT collection_grants_role_name_check CHECK ((btrim(role_name) <> ''::text))
);

-- comment: TABLE collection_grants
COMMENT ON TABLE kb.collection_grants IS 'Which collections a role (and every role that is a member of it) may read through the kb functions; collection NULL = every collection. Written by pgkb db grant/revoke as the owner.';

-- comment: COLUMN collection_grants.can_write
COMMENT ON COLUMN kb.collection_grants.can_write IS 'The role may also write into the collection: submit and remove documents (kb.submit_document, kb.submit_file, kb.remove_document).';

-- table: collection_stats
CREATE TABLE kb.collection_stats (
    collection text NOT NULL,
    chunk_count bigint DEFAULT 0 NOT NULL,
    total_lexemes bigint DEFAULT 0 NOT NULL
);

-- comment: TABLE collection_stats
COMMENT ON TABLE kb.collection_stats IS 'Per collection: number of chunks and the sum of their lengths in distinct lexemes (length(tsv)), for BM25''s IDF and average chunk length; kept current by a trigger on kb.chunks.';

-- table: collection_term_stats
CREATE TABLE kb.collection_term_stats (
    lexeme text NOT NULL,
    collection text NOT NULL,
    df integer NOT NULL,
    CONSTRAINT collection_term_stats_df_check CHECK ((df >= 0))
);

-- comment: TABLE collection_term_stats
COMMENT ON TABLE kb.collection_term_stats IS 'Chunk frequency of each lexeme in each collection (chunks of the collection containing it), kept current by a trigger on kb.chunks.';

-- table: collections
CREATE TABLE kb.collections (
    name text NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT collections_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'::text))
);

-- comment: TABLE collections
COMMENT ON TABLE kb.collections IS 'The knowledge bases of this database: every document belongs to one (kb.documents.collection); readers are granted collections (kb.collection_grants).';

-- view: corpus_stats
CREATE VIEW kb.corpus_stats AS
 SELECT (COALESCE(sum(chunk_count), (0)::numeric))::bigint AS chunk_count,
    (COALESCE(sum(total_lexemes), (0)::numeric))::bigint AS total_lexemes
   FROM kb.collection_stats s;

-- comment: VIEW corpus_stats
COMMENT ON VIEW kb.corpus_stats IS 'One row: number of chunks of the whole database and the sum of their lengths in distinct lexemes: kb.collection_stats summed.';

-- table: document_links
CREATE TABLE kb.document_links (
    source_id uuid NOT NULL,
    target_uri text NOT NULL,
    href text NOT NULL,
    anchor text DEFAULT ''::text NOT NULL,
    CONSTRAINT document_links_target_uri_check CHECK ((btrim(target_uri) <> ''::text))
);

-- comment: TABLE document_links
COMMENT ON TABLE kb.document_links IS 'Hyperlinks as extracted (href as written, target_uri resolved against the linking file, fragment dropped); the ones whose target_uri is an ingested document are also edges in kb.document_relations.';

-- table: document_relations
CREATE TABLE kb.document_relations (
    source_id uuid NOT NULL,
    target_id uuid NOT NULL,
    relation_type text NOT NULL,
    confidence real,
    evidence text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    origin text DEFAULT 'link'::text NOT NULL,
    CONSTRAINT document_relations_check CHECK ((source_id <> target_id)),
    CONSTRAINT document_relations_confidence_check CHECK (((confidence >= (0)::double precision) AND (confidence <= (1)::double precision))),
    CONSTRAINT document_relations_origin_check CHECK ((origin = ANY (ARRAY['link'::text, 'mention'::text, 'llm'::text]))),
    CONSTRAINT document_relations_relation_type_check CHECK ((relation_type = ANY (ARRAY['references'::text, 'supersedes'::text, 'supplements'::text, 'contradicts'::text, 'depicts'::text])))
);

-- comment: TABLE document_relations
COMMENT ON TABLE kb.document_relations IS 'Typed edges between documents: one per (source, target, type), no self-loops.';

-- comment: COLUMN document_relations.evidence
COMMENT ON COLUMN kb.document_relations.evidence IS 'Short text that shows the relation: anchor text, the mentioning sentence, or the model''s reason.';

-- comment: COLUMN document_relations.origin
COMMENT ON COLUMN kb.document_relations.origin IS 'link (a hyperlink), mention (title or file name named in the text) or llm (proposed by a chat model, validated).';

-- table: documents
CREATE TABLE kb.documents (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    source_uri text NOT NULL,
    title text NOT NULL,
    content_sha text NOT NULL,
    category text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    summary text,
    doc_type text DEFAULT 'general'::text NOT NULL,
    key_entities text[] DEFAULT '{}'::text[] NOT NULL,
    toc jsonb DEFAULT '[]'::jsonb NOT NULL,
    metadata_origin text,
    metadata_sha text,
    collection text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT documents_doc_type_check CHECK ((doc_type = ANY (ARRAY['policy'::text, 'manual'::text, 'technical_spec'::text, 'report'::text, 'reference'::text, 'general'::text]))),
    CONSTRAINT documents_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT documents_metadata_origin_check CHECK ((metadata_origin = ANY (ARRAY['heuristic'::text, 'llm'::text]))),
    CONSTRAINT documents_source_uri_check CHECK ((btrim(source_uri) <> ''::text)),
    CONSTRAINT documents_toc_check CHECK ((jsonb_typeof(toc) = 'array'::text))
);

-- comment: TABLE documents
COMMENT ON TABLE kb.documents IS 'One row per source and collection; (collection, source_uri) is its identity for re-ingestion, content_sha skips unchanged sources.';

-- comment: COLUMN documents.summary
COMMENT ON COLUMN kb.documents.summary IS 'A few sentences saying what the document is about (lead sentences, or a chat model''s summary).';

-- comment: COLUMN documents.doc_type
COMMENT ON COLUMN kb.documents.doc_type IS 'policy, manual, technical_spec, report, reference or general.';

-- comment: COLUMN documents.key_entities
COMMENT ON COLUMN kb.documents.key_entities IS 'Names, identifiers and distinctive terms the document is about.';

-- comment: COLUMN documents.toc
COMMENT ON COLUMN kb.documents.toc IS 'Outline: array of {title, level, chunk_start, chunk_end} (chunk_index range, inclusive) in document order.';

-- comment: COLUMN documents.metadata_origin
COMMENT ON COLUMN kb.documents.metadata_origin IS 'Who made summary/doc_type/key_entities/toc: heuristic (deterministic) or llm.';

-- comment: COLUMN documents.metadata_sha
COMMENT ON COLUMN kb.documents.metadata_sha IS 'content_sha the metadata was made from; regenerated only when content_sha changes.';

-- comment: COLUMN documents.collection
COMMENT ON COLUMN kb.documents.collection IS 'The collection (kb.collections) the document belongs to; source_uri is unique within it.';

-- table: embedding_models
CREATE TABLE kb.embedding_models (
    id integer NOT NULL,
    name text NOT NULL,
    dims integer NOT NULL,
    provider text NOT NULL,
    is_active boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    config jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT embedding_models_config_check CHECK ((jsonb_typeof(config) = 'object'::text)),
    CONSTRAINT embedding_models_dims_check CHECK (((dims >= 1) AND (dims <= 16000))),
    CONSTRAINT embedding_models_name_check CHECK ((btrim(name) <> ''::text))
);

-- comment: TABLE embedding_models
COMMENT ON TABLE kb.embedding_models IS 'Embedding models (name + dims = one vector space); exactly one is active.';

-- comment: COLUMN embedding_models.config
COMMENT ON COLUMN kb.embedding_models.config IS 'What pgkb needs to embed with the model again (base_url, max_input_tokens); never an API key.';

-- sequence: embedding_models_id_seq
ALTER TABLE kb.embedding_models ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME kb.embedding_models_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- table: embeddings
CREATE TABLE kb.embeddings (
    chunk_id bigint NOT NULL,
    model_id integer NOT NULL,
    embedding public.vector NOT NULL
);

-- comment: TABLE embeddings
COMMENT ON TABLE kb.embeddings IS 'One vector per (chunk, model); searched through the model''s partial HNSW index embeddings_hnsw_model_<id>.';

-- table: ingest_runs
CREATE TABLE kb.ingest_runs (
    id bigint NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    paths text[] DEFAULT '{}'::text[] NOT NULL,
    docs_new integer,
    docs_changed integer,
    docs_unchanged integer,
    docs_pruned integer,
    docs_failed integer,
    chunks_written integer,
    exit_code integer,
    error text,
    db_user text DEFAULT CURRENT_USER NOT NULL,
    failures jsonb DEFAULT '[]'::jsonb NOT NULL,
    CONSTRAINT ingest_runs_failures_check CHECK ((jsonb_typeof(failures) = 'array'::text))
);

-- comment: TABLE ingest_runs
COMMENT ON TABLE kb.ingest_runs IS 'One row per ingestion run (kb.ingest_run_begin / kb.ingest_run_end): when, what paths, what it did, how it ended; finished_at NULL = did not finish.';

-- comment: COLUMN ingest_runs.failures
COMMENT ON COLUMN kb.ingest_runs.failures IS 'The sources the run could not ingest: [{source, reason}], the first 100.';

-- sequence: ingest_runs_id_seq
ALTER TABLE kb.ingest_runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME kb.ingest_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- table: settings
CREATE TABLE kb.settings (
    key text NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

-- comment: TABLE settings
COMMENT ON TABLE kb.settings IS 'Derived settings stored with the knowledge base (e.g. calibrated thresholds), by key.';

-- table: term_postings
CREATE TABLE kb.term_postings (
    lexeme text NOT NULL COLLATE pg_catalog."C",
    impact real NOT NULL,
    chunk_id bigint NOT NULL
);

-- comment: TABLE term_postings
COMMENT ON TABLE kb.term_postings IS 'Impact-ordered postings of the lexemes held by more than 100 chunks (impact: kb.term_impacts), kept current by the statistics trigger on kb.chunks; kb.keyword_search reads a common word''s best chunks from it.';

-- view: term_stats
CREATE VIEW kb.term_stats AS
 SELECT lexeme,
    (sum(df))::integer AS df
   FROM kb.collection_term_stats t
  GROUP BY lexeme;

-- comment: VIEW term_stats
COMMENT ON VIEW kb.term_stats IS 'Chunk frequency of each lexeme in the whole database: kb.collection_term_stats summed over every collection.';

-- table: vector_indexes
CREATE TABLE kb.vector_indexes (
    model_id integer NOT NULL,
    index_name text NOT NULL,
    m integer NOT NULL,
    ef_construction integer NOT NULL,
    ef_search integer NOT NULL,
    embedding_count bigint NOT NULL,
    sized_by text NOT NULL,
    built_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT vector_indexes_ef_construction_check CHECK (((ef_construction >= 4) AND (ef_construction <= 1000))),
    CONSTRAINT vector_indexes_ef_search_check CHECK (((ef_search >= 1) AND (ef_search <= 1000))),
    CONSTRAINT vector_indexes_embedding_count_check CHECK ((embedding_count >= 0)),
    CONSTRAINT vector_indexes_m_check CHECK (((m >= 2) AND (m <= 100))),
    CONSTRAINT vector_indexes_sized_by_check CHECK ((sized_by = ANY (ARRAY['corpus'::text, 'setting'::text])))
);

-- comment: TABLE vector_indexes
COMMENT ON TABLE kb.vector_indexes IS 'What each model''s HNSW index was built with (m, ef_construction), the ef_search kb.vector_search uses for it, the model''s embeddings at that moment, and whether the parameters were sized from that count (corpus, kb.hnsw_parameters) or given (setting). Written by kb.build_model_index.';

-- constraint: alembic_version alembic_version_pkc
ALTER TABLE ONLY kb.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);

-- constraint: chunks chunks_document_id_chunk_index_key
ALTER TABLE ONLY kb.chunks
    ADD CONSTRAINT chunks_document_id_chunk_index_key UNIQUE (document_id, chunk_index);

-- constraint: chunks chunks_pkey
ALTER TABLE ONLY kb.chunks
    ADD CONSTRAINT chunks_pkey PRIMARY KEY (id);

-- constraint: collection_stats collection_stats_pkey
ALTER TABLE ONLY kb.collection_stats
    ADD CONSTRAINT collection_stats_pkey PRIMARY KEY (collection);

-- constraint: collection_term_stats collection_term_stats_pkey
ALTER TABLE ONLY kb.collection_term_stats
    ADD CONSTRAINT collection_term_stats_pkey PRIMARY KEY (lexeme, collection);

-- constraint: collections collections_pkey
ALTER TABLE ONLY kb.collections
    ADD CONSTRAINT collections_pkey PRIMARY KEY (name);

-- constraint: document_jobs document_jobs_pkey
ALTER TABLE ONLY kb.document_jobs
    ADD CONSTRAINT document_jobs_pkey PRIMARY KEY (id);

-- constraint: document_links document_links_pkey
ALTER TABLE ONLY kb.document_links
    ADD CONSTRAINT document_links_pkey PRIMARY KEY (source_id, target_uri);

-- constraint: document_relations document_relations_pkey
ALTER TABLE ONLY kb.document_relations
    ADD CONSTRAINT document_relations_pkey PRIMARY KEY (source_id, target_id, relation_type);

-- constraint: documents documents_collection_source_uri_key
ALTER TABLE ONLY kb.documents
    ADD CONSTRAINT documents_collection_source_uri_key UNIQUE (collection, source_uri);

-- constraint: documents documents_id_collection_key
ALTER TABLE ONLY kb.documents
    ADD CONSTRAINT documents_id_collection_key UNIQUE (id, collection);

-- constraint: documents documents_pkey
ALTER TABLE ONLY kb.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (id);

-- constraint: embedding_models embedding_models_name_dims_key
ALTER TABLE ONLY kb.embedding_models
    ADD CONSTRAINT embedding_models_name_dims_key UNIQUE (name, dims);

-- constraint: embedding_models embedding_models_pkey
ALTER TABLE ONLY kb.embedding_models
    ADD CONSTRAINT embedding_models_pkey PRIMARY KEY (id);

-- constraint: embeddings embeddings_pkey
ALTER TABLE ONLY kb.embeddings
    ADD CONSTRAINT embeddings_pkey PRIMARY KEY (chunk_id, model_id);

-- constraint: ingest_runs ingest_runs_pkey
ALTER TABLE ONLY kb.ingest_runs
    ADD CONSTRAINT ingest_runs_pkey PRIMARY KEY (id);

-- constraint: settings settings_pkey
ALTER TABLE ONLY kb.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (key);

-- constraint: term_postings term_postings_pkey
ALTER TABLE ONLY kb.term_postings
    ADD CONSTRAINT term_postings_pkey PRIMARY KEY (lexeme, impact, chunk_id);

-- constraint: vector_indexes vector_indexes_pkey
ALTER TABLE ONLY kb.vector_indexes
    ADD CONSTRAINT vector_indexes_pkey PRIMARY KEY (model_id);

-- index: chunks_content_sha_idx
CREATE INDEX chunks_content_sha_idx ON kb.chunks USING btree (content_sha);

-- index: chunks_tsv_idx
CREATE INDEX chunks_tsv_idx ON kb.chunks USING gin (tsv);

-- index: collection_grants_role_collection_key
CREATE UNIQUE INDEX collection_grants_role_collection_key ON kb.collection_grants USING btree (role_name, COALESCE(collection, ''::text));

-- index: document_jobs_queue_idx
CREATE INDEX document_jobs_queue_idx ON kb.document_jobs USING btree (run_after, submitted_at) WHERE (state = ANY (ARRAY['pending'::text, 'processing'::text]));

-- index: document_jobs_source_idx
CREATE INDEX document_jobs_source_idx ON kb.document_jobs USING btree (collection, source_uri, submitted_at);

-- index: document_jobs_submitted_idx
CREATE INDEX document_jobs_submitted_idx ON kb.document_jobs USING btree (submitted_at);

-- index: document_links_target_idx
CREATE INDEX document_links_target_idx ON kb.document_links USING btree (target_uri);

-- index: document_relations_source_idx
CREATE INDEX document_relations_source_idx ON kb.document_relations USING btree (source_id, relation_type);

-- index: document_relations_target_idx
CREATE INDEX document_relations_target_idx ON kb.document_relations USING btree (target_id);

-- index: documents_category_idx
CREATE INDEX documents_category_idx ON kb.documents USING btree (category);

-- index: documents_doc_type_idx
CREATE INDEX documents_doc_type_idx ON kb.documents USING btree (doc_type);

-- index: documents_metadata_idx
CREATE INDEX documents_metadata_idx ON kb.documents USING gin (metadata jsonb_path_ops);

-- index: documents_source_uri_idx
CREATE INDEX documents_source_uri_idx ON kb.documents USING btree (source_uri);

-- index: documents_updated_at_idx
CREATE INDEX documents_updated_at_idx ON kb.documents USING btree (updated_at);

-- index: embedding_models_one_active
CREATE UNIQUE INDEX embedding_models_one_active ON kb.embedding_models USING btree (is_active) WHERE is_active;

-- index: embeddings_model_idx
CREATE INDEX embeddings_model_idx ON kb.embeddings USING btree (model_id);

-- trigger: chunks chunks_set_collection
CREATE TRIGGER chunks_set_collection BEFORE INSERT ON kb.chunks FOR EACH ROW EXECUTE FUNCTION kb.chunks_set_collection();

-- trigger: chunks chunks_stats_delete
CREATE TRIGGER chunks_stats_delete AFTER DELETE ON kb.chunks REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();

-- trigger: chunks chunks_stats_insert
CREATE TRIGGER chunks_stats_insert AFTER INSERT ON kb.chunks REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();

-- trigger: chunks chunks_stats_update
CREATE TRIGGER chunks_stats_update AFTER UPDATE ON kb.chunks REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kb.chunks_maintain_stats();

-- trigger: collections collections_keyword_index
CREATE TRIGGER collections_keyword_index AFTER INSERT OR DELETE ON kb.collections FOR EACH ROW EXECUTE FUNCTION kb.collections_keyword_index();

-- trigger: embeddings embeddings_check_dims
CREATE TRIGGER embeddings_check_dims BEFORE INSERT OR UPDATE ON kb.embeddings FOR EACH ROW EXECUTE FUNCTION kb.embeddings_check_dims();

-- fk constraint: chunks chunks_document_collection_fkey
ALTER TABLE ONLY kb.chunks
    ADD CONSTRAINT chunks_document_collection_fkey FOREIGN KEY (document_id, collection) REFERENCES kb.documents(id, collection) MATCH FULL ON UPDATE CASCADE ON DELETE CASCADE;

-- fk constraint: collection_grants collection_grants_collection_fkey
ALTER TABLE ONLY kb.collection_grants
    ADD CONSTRAINT collection_grants_collection_fkey FOREIGN KEY (collection) REFERENCES kb.collections(name) ON DELETE CASCADE;

-- fk constraint: collection_stats collection_stats_collection_fkey
ALTER TABLE ONLY kb.collection_stats
    ADD CONSTRAINT collection_stats_collection_fkey FOREIGN KEY (collection) REFERENCES kb.collections(name) ON DELETE CASCADE;

-- fk constraint: document_jobs document_jobs_collection_fkey
ALTER TABLE ONLY kb.document_jobs
    ADD CONSTRAINT document_jobs_collection_fkey FOREIGN KEY (collection) REFERENCES kb.collections(name) ON DELETE CASCADE;

-- fk constraint: document_links document_links_source_id_fkey
ALTER TABLE ONLY kb.document_links
    ADD CONSTRAINT document_links_source_id_fkey FOREIGN KEY (source_id) REFERENCES kb.documents(id) ON DELETE CASCADE;

-- fk constraint: document_relations document_relations_source_id_fkey
ALTER TABLE ONLY kb.document_relations
    ADD CONSTRAINT document_relations_source_id_fkey FOREIGN KEY (source_id) REFERENCES kb.documents(id) ON DELETE CASCADE;

-- fk constraint: document_relations document_relations_target_id_fkey
ALTER TABLE ONLY kb.document_relations
    ADD CONSTRAINT document_relations_target_id_fkey FOREIGN KEY (target_id) REFERENCES kb.documents(id) ON DELETE CASCADE;

-- fk constraint: documents documents_collection_fkey
ALTER TABLE ONLY kb.documents
    ADD CONSTRAINT documents_collection_fkey FOREIGN KEY (collection) REFERENCES kb.collections(name);

-- fk constraint: embeddings embeddings_chunk_id_fkey
ALTER TABLE ONLY kb.embeddings
    ADD CONSTRAINT embeddings_chunk_id_fkey FOREIGN KEY (chunk_id) REFERENCES kb.chunks(id) ON DELETE CASCADE;

-- fk constraint: embeddings embeddings_model_id_fkey
ALTER TABLE ONLY kb.embeddings
    ADD CONSTRAINT embeddings_model_id_fkey FOREIGN KEY (model_id) REFERENCES kb.embedding_models(id) ON DELETE CASCADE;

-- fk constraint: vector_indexes vector_indexes_model_id_fkey
ALTER TABLE ONLY kb.vector_indexes
    ADD CONSTRAINT vector_indexes_model_id_fkey FOREIGN KEY (model_id) REFERENCES kb.embedding_models(id) ON DELETE CASCADE;

-- row security: chunks
ALTER TABLE kb.chunks ENABLE ROW LEVEL SECURITY;

-- row security: document_links
ALTER TABLE kb.document_links ENABLE ROW LEVEL SECURITY;

-- row security: document_relations
ALTER TABLE kb.document_relations ENABLE ROW LEVEL SECURITY;

-- row security: documents
ALTER TABLE kb.documents ENABLE ROW LEVEL SECURITY;

-- row security: embeddings
ALTER TABLE kb.embeddings ENABLE ROW LEVEL SECURITY;

-- policy: chunks reader_collections
CREATE POLICY reader_collections ON kb.chunks FOR SELECT TO kb_reader USING ((EXISTS ( SELECT 1
   FROM kb.documents d
  WHERE ((d.id = chunks.document_id) AND kb.collection_readable(d.collection)))));

-- policy: document_links reader_collections
CREATE POLICY reader_collections ON kb.document_links FOR SELECT TO kb_reader USING ((EXISTS ( SELECT 1
   FROM kb.documents d
  WHERE ((d.id = document_links.source_id) AND kb.collection_readable(d.collection)))));

-- policy: document_relations reader_collections
CREATE POLICY reader_collections ON kb.document_relations FOR SELECT TO kb_reader USING (((EXISTS ( SELECT 1
   FROM kb.documents d
  WHERE ((d.id = document_relations.source_id) AND kb.collection_readable(d.collection)))) AND (EXISTS ( SELECT 1
   FROM kb.documents d
  WHERE ((d.id = document_relations.target_id) AND kb.collection_readable(d.collection))))));

-- policy: documents reader_collections
CREATE POLICY reader_collections ON kb.documents FOR SELECT TO kb_reader USING (kb.collection_readable(collection));

-- policy: embeddings reader_collections
CREATE POLICY reader_collections ON kb.embeddings FOR SELECT TO kb_reader USING ((EXISTS ( SELECT 1
   FROM (kb.chunks c
     JOIN kb.documents d ON ((d.id = c.document_id)))
  WHERE ((c.id = embeddings.chunk_id) AND kb.collection_readable(d.collection)))));

-- policy: chunks writer_all
CREATE POLICY writer_all ON kb.chunks TO kb_writer USING (true) WITH CHECK (true);

-- policy: document_links writer_all
CREATE POLICY writer_all ON kb.document_links TO kb_writer USING (true) WITH CHECK (true);

-- policy: document_relations writer_all
CREATE POLICY writer_all ON kb.document_relations TO kb_writer USING (true) WITH CHECK (true);

-- policy: documents writer_all
CREATE POLICY writer_all ON kb.documents TO kb_writer USING (true) WITH CHECK (true);

-- policy: embeddings writer_all
CREATE POLICY writer_all ON kb.embeddings TO kb_writer USING (true) WITH CHECK (true);

-- acl: SCHEMA kb
GRANT USAGE ON SCHEMA kb TO kb_reader;
GRANT USAGE ON SCHEMA kb TO kb_writer;

-- acl: FUNCTION abstention_rule()
REVOKE ALL ON FUNCTION kb.abstention_rule() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.abstention_rule() TO kb_reader;

-- acl: FUNCTION activate_model(model_name text, model_dims integer)
REVOKE ALL ON FUNCTION kb.activate_model(model_name text, model_dims integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.activate_model(model_name text, model_dims integer) TO kb_writer;

-- acl: FUNCTION active_model()
REVOKE ALL ON FUNCTION kb.active_model() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.active_model() TO kb_writer;
GRANT ALL ON FUNCTION kb.active_model() TO kb_reader;

-- acl: FUNCTION build_keyword_indexes()
REVOKE ALL ON FUNCTION kb.build_keyword_indexes() FROM PUBLIC;

-- acl: FUNCTION build_model_index(model_id integer, hnsw_m integer, hnsw_ef_construction integer)
REVOKE ALL ON FUNCTION kb.build_model_index(model_id integer, hnsw_m integer, hnsw_ef_construction integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.build_model_index(model_id integer, hnsw_m integer, hnsw_ef_construction integer) TO kb_writer;

-- acl: FUNCTION cancel_overdue_queries(max_runtime interval, member_of name)
REVOKE ALL ON FUNCTION kb.cancel_overdue_queries(max_runtime interval, member_of name) FROM PUBLIC;

-- acl: FUNCTION chunk_details(chunk_ids bigint[])
REVOKE ALL ON FUNCTION kb.chunk_details(chunk_ids bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.chunk_details(chunk_ids bigint[]) TO kb_reader;

-- acl: FUNCTION chunk_lexemes(chunk_ids bigint[], lexemes text[])
REVOKE ALL ON FUNCTION kb.chunk_lexemes(chunk_ids bigint[], lexemes text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.chunk_lexemes(chunk_ids bigint[], lexemes text[]) TO kb_reader;

-- acl: FUNCTION chunks_missing_embedding(model_id integer, batch_size integer, after_chunk bigint)
REVOKE ALL ON FUNCTION kb.chunks_missing_embedding(model_id integer, batch_size integer, after_chunk bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.chunks_missing_embedding(model_id integer, batch_size integer, after_chunk bigint) TO kb_writer;

-- acl: TABLE document_jobs
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.document_jobs TO kb_writer;

-- acl: FUNCTION claim_document_job(worker text, lease_seconds integer)
REVOKE ALL ON FUNCTION kb.claim_document_job(worker text, lease_seconds integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.claim_document_job(worker text, lease_seconds integer) TO kb_writer;

-- acl: FUNCTION collection_list()
REVOKE ALL ON FUNCTION kb.collection_list() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.collection_list() TO kb_reader;
GRANT ALL ON FUNCTION kb.collection_list() TO kb_writer;

-- acl: FUNCTION collection_readable(collection text)
REVOKE ALL ON FUNCTION kb.collection_readable(collection text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.collection_readable(collection text) TO kb_reader;
GRANT ALL ON FUNCTION kb.collection_readable(collection text) TO kb_writer;

-- acl: FUNCTION collection_scope(requested text[])
REVOKE ALL ON FUNCTION kb.collection_scope(requested text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.collection_scope(requested text[]) TO kb_reader;
GRANT ALL ON FUNCTION kb.collection_scope(requested text[]) TO kb_writer;

-- acl: FUNCTION collection_writable(collection text)
REVOKE ALL ON FUNCTION kb.collection_writable(collection text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.collection_writable(collection text) TO kb_reader;
GRANT ALL ON FUNCTION kb.collection_writable(collection text) TO kb_writer;

-- acl: FUNCTION collections_keyword_index()
REVOKE ALL ON FUNCTION kb.collections_keyword_index() FROM PUBLIC;

-- acl: FUNCTION document_facets(filters jsonb)
REVOKE ALL ON FUNCTION kb.document_facets(filters jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.document_facets(filters jsonb) TO kb_reader;

-- acl: FUNCTION document_jobs(job_state text, max_rows integer, job_id uuid)
REVOKE ALL ON FUNCTION kb.document_jobs(job_state text, max_rows integer, job_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.document_jobs(job_state text, max_rows integer, job_id uuid) TO kb_reader;
GRANT ALL ON FUNCTION kb.document_jobs(job_state text, max_rows integer, job_id uuid) TO kb_writer;

-- acl: FUNCTION document_list(filters jsonb, document_ids uuid[], max_results integer)
REVOKE ALL ON FUNCTION kb.document_list(filters jsonb, document_ids uuid[], max_results integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.document_list(filters jsonb, document_ids uuid[], max_results integer) TO kb_reader;

-- acl: FUNCTION document_page(filters jsonb, document_type text, title_words text, sort text, stale_after interval, page_offset integer, page_size integer, document_ids uuid[])
REVOKE ALL ON FUNCTION kb.document_page(filters jsonb, document_type text, title_words text, sort text, stale_after interval, page_offset integer, page_size integer, document_ids uuid[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.document_page(filters jsonb, document_type text, title_words text, sort text, stale_after interval, page_offset integer, page_size integer, document_ids uuid[]) TO kb_reader;

-- acl: FUNCTION drop_model(model_name text, model_dims integer)
REVOKE ALL ON FUNCTION kb.drop_model(model_name text, model_dims integer) FROM PUBLIC;

-- acl: FUNCTION drop_model_index(model_id integer)
REVOKE ALL ON FUNCTION kb.drop_model_index(model_id integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.drop_model_index(model_id integer) TO kb_writer;

-- acl: FUNCTION enqueue_document(action text, source_uri text, collection text, title text, content text, data bytea, mime_type text, metadata jsonb, category text)
REVOKE ALL ON FUNCTION kb.enqueue_document(action text, source_uri text, collection text, title text, content text, data bytea, mime_type text, metadata jsonb, category text) FROM PUBLIC;

-- acl: FUNCTION explore_graph(start_document uuid, query_text text, max_depth integer, relation_types text[], filters jsonb, document_ids uuid[], max_results integer)
REVOKE ALL ON FUNCTION kb.explore_graph(start_document uuid, query_text text, max_depth integer, relation_types text[], filters jsonb, document_ids uuid[], max_results integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.explore_graph(start_document uuid, query_text text, max_depth integer, relation_types text[], filters jsonb, document_ids uuid[], max_results integer) TO kb_reader;

-- acl: FUNCTION find_documents(ref text, filters jsonb)
REVOKE ALL ON FUNCTION kb.find_documents(ref text, filters jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.find_documents(ref text, filters jsonb) TO kb_reader;

-- acl: FUNCTION finish_document_job(job_id uuid, worker text, outcome text, error text, retry_seconds double precision, document_id uuid)
REVOKE ALL ON FUNCTION kb.finish_document_job(job_id uuid, worker text, outcome text, error text, retry_seconds double precision, document_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.finish_document_job(job_id uuid, worker text, outcome text, error text, retry_seconds double precision, document_id uuid) TO kb_writer;

-- acl: FUNCTION finish_load(changed_chunks bigint)
REVOKE ALL ON FUNCTION kb.finish_load(changed_chunks bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.finish_load(changed_chunks bigint) TO kb_writer;

-- acl: FUNCTION hnsw_ef_search(model_id integer, match_count integer, ef_search integer)
REVOKE ALL ON FUNCTION kb.hnsw_ef_search(model_id integer, match_count integer, ef_search integer) FROM PUBLIC;

-- acl: FUNCTION hnsw_parameters(embedding_count bigint, OUT m integer, OUT ef_construction integer, OUT ef_search integer, OUT tier text)
REVOKE ALL ON FUNCTION kb.hnsw_parameters(embedding_count bigint, OUT m integer, OUT ef_construction integer, OUT ef_search integer, OUT tier text) FROM PUBLIC;

-- acl: FUNCTION hybrid_search(query_text text, query_embedding public.vector, match_count integer, vector_candidates integer, keyword_candidates integer, rrf_k integer, vector_weight double precision, keyword_weight double precision, filters jsonb, document_ids uuid[], min_similarity double precision, model text, keyword_ranking text, max_per_document integer, exact_keyword_weight double precision, ef_search integer, keyword_confidence double precision, lead_slot integer)
REVOKE ALL ON FUNCTION kb.hybrid_search(query_text text, query_embedding public.vector, match_count integer, vector_candidates integer, keyword_candidates integer, rrf_k integer, vector_weight double precision, keyword_weight double precision, filters jsonb, document_ids uuid[], min_similarity double precision, model text, keyword_ranking text, max_per_document integer, exact_keyword_weight double precision, ef_search integer, keyword_confidence double precision, lead_slot integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.hybrid_search(query_text text, query_embedding public.vector, match_count integer, vector_candidates integer, keyword_candidates integer, rrf_k integer, vector_weight double precision, keyword_weight double precision, filters jsonb, document_ids uuid[], min_similarity double precision, model text, keyword_ranking text, max_per_document integer, exact_keyword_weight double precision, ef_search integer, keyword_confidence double precision, lead_slot integer) TO kb_reader;

-- acl: FUNCTION ingest_activity(max_runs integer)
REVOKE ALL ON FUNCTION kb.ingest_activity(max_runs integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.ingest_activity(max_runs integer) TO kb_reader;
GRANT ALL ON FUNCTION kb.ingest_activity(max_runs integer) TO kb_writer;

-- acl: FUNCTION ingest_run_begin(paths text[])
REVOKE ALL ON FUNCTION kb.ingest_run_begin(paths text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.ingest_run_begin(paths text[]) TO kb_writer;

-- acl: FUNCTION ingest_run_end(run_id bigint, report jsonb)
REVOKE ALL ON FUNCTION kb.ingest_run_end(run_id bigint, report jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.ingest_run_end(run_id bigint, report jsonb) TO kb_writer;

-- acl: FUNCTION keyword_backend(collections text[])
REVOKE ALL ON FUNCTION kb.keyword_backend(collections text[]) FROM PUBLIC;

-- acl: FUNCTION keyword_backend_status()
REVOKE ALL ON FUNCTION kb.keyword_backend_status() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.keyword_backend_status() TO kb_reader;
GRANT ALL ON FUNCTION kb.keyword_backend_status() TO kb_writer;

-- acl: FUNCTION keyword_index_name(collection text)
REVOKE ALL ON FUNCTION kb.keyword_index_name(collection text) FROM PUBLIC;

-- acl: FUNCTION keyword_search(query_text text, match_count integer, filters jsonb, document_ids uuid[], keyword_ranking text, bm25_k1 double precision, bm25_b double precision, heading_weight double precision, max_postings integer)
REVOKE ALL ON FUNCTION kb.keyword_search(query_text text, match_count integer, filters jsonb, document_ids uuid[], keyword_ranking text, bm25_k1 double precision, bm25_b double precision, heading_weight double precision, max_postings integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.keyword_search(query_text text, match_count integer, filters jsonb, document_ids uuid[], keyword_ranking text, bm25_k1 double precision, bm25_b double precision, heading_weight double precision, max_postings integer) TO kb_reader;

-- acl: FUNCTION keyword_search_pg_textsearch(query_text text, match_count integer, filters jsonb, document_ids uuid[])
REVOKE ALL ON FUNCTION kb.keyword_search_pg_textsearch(query_text text, match_count integer, filters jsonb, document_ids uuid[]) FROM PUBLIC;

-- acl: FUNCTION merge_neighbors(chunk_id bigint, before integer, after integer)
REVOKE ALL ON FUNCTION kb.merge_neighbors(chunk_id bigint, before integer, after integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.merge_neighbors(chunk_id bigint, before integer, after integer) TO kb_reader;

-- acl: FUNCTION models()
REVOKE ALL ON FUNCTION kb.models() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.models() TO kb_writer;

-- acl: FUNCTION name_found(phrase text, surface_regex text)
REVOKE ALL ON FUNCTION kb.name_found(phrase text, surface_regex text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.name_found(phrase text, surface_regex text) TO kb_reader;

-- acl: FUNCTION near_lexemes(lexeme text)
REVOKE ALL ON FUNCTION kb.near_lexemes(lexeme text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.near_lexemes(lexeme text) TO kb_reader;

-- acl: FUNCTION neighbor_chunks(chunk_id bigint, before integer, after integer)
REVOKE ALL ON FUNCTION kb.neighbor_chunks(chunk_id bigint, before integer, after integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.neighbor_chunks(chunk_id bigint, before integer, after integer) TO kb_reader;

-- acl: FUNCTION pseudo_queries(sample_size integer)
REVOKE ALL ON FUNCTION kb.pseudo_queries(sample_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.pseudo_queries(sample_size integer) TO kb_reader;

-- acl: FUNCTION query_terms(query_text text)
REVOKE ALL ON FUNCTION kb.query_terms(query_text text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.query_terms(query_text text) TO kb_reader;

-- acl: FUNCTION read_document(document_id uuid, chunk_start integer, chunk_end integer, token_budget integer)
REVOKE ALL ON FUNCTION kb.read_document(document_id uuid, chunk_start integer, chunk_end integer, token_budget integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.read_document(document_id uuid, chunk_start integer, chunk_end integer, token_budget integer) TO kb_reader;

-- acl: FUNCTION readable_collections()
REVOKE ALL ON FUNCTION kb.readable_collections() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.readable_collections() TO kb_reader;
GRANT ALL ON FUNCTION kb.readable_collections() TO kb_writer;

-- acl: FUNCTION rebuild_keyword_stats()
REVOKE ALL ON FUNCTION kb.rebuild_keyword_stats() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.rebuild_keyword_stats() TO kb_writer;

-- acl: FUNCTION register_model(model_name text, model_dims integer, model_provider text, model_config jsonb, hnsw_m integer, hnsw_ef_construction integer)
REVOKE ALL ON FUNCTION kb.register_model(model_name text, model_dims integer, model_provider text, model_config jsonb, hnsw_m integer, hnsw_ef_construction integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.register_model(model_name text, model_dims integer, model_provider text, model_config jsonb, hnsw_m integer, hnsw_ef_construction integer) TO kb_writer;

-- acl: FUNCTION remove_document(source_uri text, collection text)
REVOKE ALL ON FUNCTION kb.remove_document(source_uri text, collection text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.remove_document(source_uri text, collection text) TO kb_reader;
GRANT ALL ON FUNCTION kb.remove_document(source_uri text, collection text) TO kb_writer;

-- acl: FUNCTION remove_documents(source_uris text[], document_ids uuid[], source_pattern text, dry_run boolean, collections text[])
REVOKE ALL ON FUNCTION kb.remove_documents(source_uris text[], document_ids uuid[], source_pattern text, dry_run boolean, collections text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.remove_documents(source_uris text[], document_ids uuid[], source_pattern text, dry_run boolean, collections text[]) TO kb_writer;

-- acl: FUNCTION resize_model_index(model_id integer)
REVOKE ALL ON FUNCTION kb.resize_model_index(model_id integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.resize_model_index(model_id integer) TO kb_writer;

-- acl: FUNCTION schema_version()
REVOKE ALL ON FUNCTION kb.schema_version() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.schema_version() TO kb_reader;
GRANT ALL ON FUNCTION kb.schema_version() TO kb_writer;

-- acl: FUNCTION search_relations()
REVOKE ALL ON FUNCTION kb.search_relations() FROM PUBLIC;

-- acl: FUNCTION show_document(document_id uuid)
REVOKE ALL ON FUNCTION kb.show_document(document_id uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.show_document(document_id uuid) TO kb_reader;

-- acl: FUNCTION similarity_profile()
REVOKE ALL ON FUNCTION kb.similarity_profile() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.similarity_profile() TO kb_reader;

-- acl: FUNCTION squashed_lexeme_found(squashed text)
REVOKE ALL ON FUNCTION kb.squashed_lexeme_found(squashed text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.squashed_lexeme_found(squashed text) TO kb_reader;

-- acl: FUNCTION stale_documents(older_than interval, collections text[])
REVOKE ALL ON FUNCTION kb.stale_documents(older_than interval, collections text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.stale_documents(older_than interval, collections text[]) TO kb_writer;

-- acl: FUNCTION stats(last_runs integer, filters jsonb)
REVOKE ALL ON FUNCTION kb.stats(last_runs integer, filters jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.stats(last_runs integer, filters jsonb) TO kb_writer;
GRANT ALL ON FUNCTION kb.stats(last_runs integer, filters jsonb) TO kb_reader;

-- acl: FUNCTION submit_document(source_uri text, title text, content text, metadata jsonb, category text, collection text)
REVOKE ALL ON FUNCTION kb.submit_document(source_uri text, title text, content text, metadata jsonb, category text, collection text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.submit_document(source_uri text, title text, content text, metadata jsonb, category text, collection text) TO kb_reader;
GRANT ALL ON FUNCTION kb.submit_document(source_uri text, title text, content text, metadata jsonb, category text, collection text) TO kb_writer;

-- acl: FUNCTION submit_file(source_uri text, data bytea, mime_type text, title text, metadata jsonb, category text, collection text)
REVOKE ALL ON FUNCTION kb.submit_file(source_uri text, data bytea, mime_type text, title text, metadata jsonb, category text, collection text) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.submit_file(source_uri text, data bytea, mime_type text, title text, metadata jsonb, category text, collection text) TO kb_reader;
GRANT ALL ON FUNCTION kb.submit_file(source_uri text, data bytea, mime_type text, title text, metadata jsonb, category text, collection text) TO kb_writer;

-- acl: FUNCTION table_rows(relation regclass)
REVOKE ALL ON FUNCTION kb.table_rows(relation regclass) FROM PUBLIC;

-- acl: FUNCTION term_df(lexemes text[])
REVOKE ALL ON FUNCTION kb.term_df(lexemes text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.term_df(lexemes text[]) TO kb_reader;

-- acl: FUNCTION training_passages(after_chunk bigint, batch_size integer)
REVOKE ALL ON FUNCTION kb.training_passages(after_chunk bigint, batch_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.training_passages(after_chunk bigint, batch_size integer) TO kb_writer;

-- acl: FUNCTION vector_index_status()
REVOKE ALL ON FUNCTION kb.vector_index_status() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.vector_index_status() TO kb_writer;

-- acl: FUNCTION vector_search(query_embedding public.vector, match_count integer, filters jsonb, document_ids uuid[], min_similarity double precision, model text, ef_search integer)
REVOKE ALL ON FUNCTION kb.vector_search(query_embedding public.vector, match_count integer, filters jsonb, document_ids uuid[], min_similarity double precision, model text, ef_search integer) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.vector_search(query_embedding public.vector, match_count integer, filters jsonb, document_ids uuid[], min_similarity double precision, model text, ef_search integer) TO kb_reader;

-- acl: FUNCTION word_lexemes(words text[])
REVOKE ALL ON FUNCTION kb.word_lexemes(words text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION kb.word_lexemes(words text[]) TO kb_reader;

-- acl: FUNCTION writable_collections()
REVOKE ALL ON FUNCTION kb.writable_collections() FROM PUBLIC;
GRANT ALL ON FUNCTION kb.writable_collections() TO kb_reader;
GRANT ALL ON FUNCTION kb.writable_collections() TO kb_writer;

-- acl: TABLE alembic_version
GRANT SELECT ON TABLE kb.alembic_version TO kb_writer;

-- acl: TABLE chunks
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.chunks TO kb_writer;

-- acl: SEQUENCE chunks_id_seq
GRANT SELECT,USAGE ON SEQUENCE kb.chunks_id_seq TO kb_writer;

-- acl: TABLE collection_stats
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.collection_stats TO kb_writer;

-- acl: TABLE collection_term_stats
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.collection_term_stats TO kb_writer;

-- acl: TABLE collections
GRANT SELECT,INSERT,UPDATE ON TABLE kb.collections TO kb_writer;

-- acl: TABLE corpus_stats
GRANT SELECT ON TABLE kb.corpus_stats TO kb_writer;

-- acl: TABLE document_links
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.document_links TO kb_writer;

-- acl: TABLE document_relations
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.document_relations TO kb_writer;

-- acl: TABLE documents
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.documents TO kb_writer;

-- acl: TABLE embedding_models
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.embedding_models TO kb_writer;

-- acl: SEQUENCE embedding_models_id_seq
GRANT SELECT,USAGE ON SEQUENCE kb.embedding_models_id_seq TO kb_writer;

-- acl: TABLE embeddings
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.embeddings TO kb_writer;

-- acl: TABLE ingest_runs
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.ingest_runs TO kb_writer;

-- acl: SEQUENCE ingest_runs_id_seq
GRANT SELECT,USAGE ON SEQUENCE kb.ingest_runs_id_seq TO kb_writer;

-- acl: TABLE settings
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.settings TO kb_writer;

-- acl: TABLE term_postings
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE kb.term_postings TO kb_writer;

-- acl: TABLE term_stats
GRANT SELECT ON TABLE kb.term_stats TO kb_writer;
