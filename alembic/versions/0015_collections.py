"""collections: several knowledge bases in one database, reader access per collection in SQL

kb.collections names the knowledge bases of the database; every document belongs to one
(kb.documents.collection, default 'default': existing documents move there in place, nothing is
re-embedded) and a source_uri is unique within its collection. kb.collection_grants says which
collections a role may read (collection NULL = all; every existing member of kb_reader is given
all, so nothing changes for them). The reader functions apply the caller's collections
(kb.readable_collections, kb.collection_scope, kb.collection_readable; the `collections` key of
the filters object), and row-level security on kb.documents, kb.chunks, kb.embeddings,
kb.document_relations and kb.document_links applies them to any direct read by a kb_reader role.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0015.sql
FUNCTIONS = (
    "chunk_details",
    "chunk_lexemes",
    "collection_list",
    "collection_readable",
    "collection_scope",
    "document_list",
    "explore_graph",
    "find_documents",
    "keyword_search",
    "name_found",
    "near_lexemes",
    "neighbor_chunks",
    "pseudo_queries",
    "query_terms",
    "read_document",
    "readable_collections",
    "remove_documents",
    "search_filters",
    "show_document",
    "squashed_lexeme_found",
    "stale_documents",
    "stats",
    "term_df",
    "vector_search",
    "word_lexemes",
)


SCHEMA_UP = """
CREATE TABLE kb.collections (
    name        text        PRIMARY KEY
                            CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.collections IS 'The knowledge bases of this database: every document belongs to one (kb.documents.collection); readers are granted collections (kb.collection_grants).';
INSERT INTO kb.collections (name, description) VALUES ('default', 'Documents ingested without --collection');

ALTER TABLE kb.documents
    ADD COLUMN collection text NOT NULL DEFAULT 'default' REFERENCES kb.collections (name);
COMMENT ON COLUMN kb.documents.collection IS 'The collection (kb.collections) the document belongs to; source_uri is unique within it.';
ALTER TABLE kb.documents DROP CONSTRAINT documents_source_uri_key;
ALTER TABLE kb.documents
    ADD CONSTRAINT documents_collection_source_uri_key UNIQUE (collection, source_uri);
CREATE INDEX documents_source_uri_idx ON kb.documents (source_uri);
COMMENT ON TABLE kb.documents IS 'One row per source and collection; (collection, source_uri) is its identity for re-ingestion, content_sha skips unchanged sources.';

CREATE TABLE kb.collection_grants (
    role_name  text        NOT NULL CHECK (btrim(role_name) <> ''),
    collection text        REFERENCES kb.collections (name) ON DELETE CASCADE,
    granted_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX collection_grants_role_collection_key
    ON kb.collection_grants (role_name, coalesce(collection, ''));
COMMENT ON TABLE kb.collection_grants IS 'Which collections a role (and every role that is a member of it) may read through the kb functions; collection NULL = every collection. Written by pgkb db grant/revoke as the owner.';

GRANT SELECT, INSERT, UPDATE ON kb.collections TO kb_writer;

-- the readers of before keep reading everything
INSERT INTO kb.collection_grants (role_name, collection)
SELECT r.rolname, NULL
  FROM pg_catalog.pg_auth_members m
  JOIN pg_catalog.pg_roles g ON g.oid = m.roleid AND g.rolname = 'kb_reader'
  JOIN pg_catalog.pg_roles r ON r.oid = m.member
ON CONFLICT DO NOTHING;
"""  # noqa: E501 (landed SQL, kept byte for byte)

# after the functions: the policies call kb.collection_readable
POLICIES_UP = """
ALTER TABLE kb.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.document_relations ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.document_links ENABLE ROW LEVEL SECURITY;
DO $$
DECLARE
    t text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_writer') THEN
        FOREACH t IN ARRAY ARRAY['documents', 'chunks', 'embeddings', 'document_relations',
                                 'document_links'] LOOP
            EXECUTE format('CREATE POLICY writer_all ON kb.%I TO kb_writer USING (true) WITH CHECK (true)', t);
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kb_reader') THEN
        CREATE POLICY reader_collections ON kb.documents FOR SELECT TO kb_reader
            USING (kb.collection_readable(collection));
        CREATE POLICY reader_collections ON kb.chunks FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = document_id AND kb.collection_readable(d.collection)));
        CREATE POLICY reader_collections ON kb.embeddings FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id
                            WHERE c.id = chunk_id AND kb.collection_readable(d.collection)));
        CREATE POLICY reader_collections ON kb.document_relations FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = source_id AND kb.collection_readable(d.collection))
               AND EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = target_id AND kb.collection_readable(d.collection)));
        CREATE POLICY reader_collections ON kb.document_links FOR SELECT TO kb_reader
            USING (EXISTS (SELECT 1 FROM kb.documents d
                            WHERE d.id = source_id AND kb.collection_readable(d.collection)));
    END IF;
END
$$;
"""  # noqa: E501 (landed SQL, kept byte for byte)

POLICIES_DOWN = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM kb.documents GROUP BY source_uri HAVING count(*) > 1) THEN
        RAISE EXCEPTION 'cannot downgrade: some source_uri is ingested into several collections'
            USING HINT = 'remove the copies (pgkb remove --collection NAME ...) so each source is stored once, then downgrade';
    END IF;
END
$$;
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['documents', 'chunks', 'embeddings', 'document_relations',
                             'document_links'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS writer_all ON kb.%I', t);
        EXECUTE format('DROP POLICY IF EXISTS reader_collections ON kb.%I', t);
        EXECUTE format('ALTER TABLE kb.%I DISABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;
"""  # noqa: E501 (landed SQL, kept byte for byte)

SCHEMA_DOWN = """
DROP TABLE kb.collection_grants;
DROP INDEX kb.documents_source_uri_idx;
ALTER TABLE kb.documents DROP CONSTRAINT documents_collection_source_uri_key;
ALTER TABLE kb.documents DROP COLUMN collection;
ALTER TABLE kb.documents ADD CONSTRAINT documents_source_uri_key UNIQUE (source_uri);
COMMENT ON TABLE kb.documents IS 'One row per source; source_uri is its identity for re-ingestion, content_sha skips unchanged sources.';
DROP TABLE kb.collections;
"""  # noqa: E501 (landed SQL, kept byte for byte)


def upgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), POLICIES_UP)


def downgrade() -> None:
    run_sql(op.get_bind(), POLICIES_DOWN)  # the policies call functions that revert drops
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), SCHEMA_DOWN)
