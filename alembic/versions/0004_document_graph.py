"""The document graph: per-document metadata, typed relations with their origin, links.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

from loader.migration_ops import downgrade_functions, run_sql, upgrade_functions

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEMA_UP = r"""
-- What each document is and how it is organised (filled by ingestion, deterministic or by a
-- chat model). metadata_sha is the content_sha they were made from: equal means up to date.
ALTER TABLE kb.documents
    ADD COLUMN summary          text,
    ADD COLUMN doc_type         text NOT NULL DEFAULT 'general'
        CONSTRAINT documents_doc_type_check CHECK (doc_type IN
            ('policy', 'manual', 'technical_spec', 'report', 'reference', 'general')),
    ADD COLUMN key_entities     text[] NOT NULL DEFAULT '{}',
    ADD COLUMN toc              jsonb NOT NULL DEFAULT '[]'::jsonb
        CONSTRAINT documents_toc_check CHECK (jsonb_typeof(toc) = 'array'),
    ADD COLUMN metadata_origin  text
        CONSTRAINT documents_metadata_origin_check CHECK (metadata_origin IN ('heuristic', 'llm')),
    ADD COLUMN metadata_sha     text;
CREATE INDEX documents_doc_type_idx ON kb.documents (doc_type);
COMMENT ON COLUMN kb.documents.summary IS 'A few sentences saying what the document is about (lead sentences, or a chat model''s summary).';
COMMENT ON COLUMN kb.documents.doc_type IS 'policy, manual, technical_spec, report, reference or general.';
COMMENT ON COLUMN kb.documents.key_entities IS 'Names, identifiers and distinctive terms the document is about.';
COMMENT ON COLUMN kb.documents.toc IS 'Outline: array of {title, level, chunk_start, chunk_end} (chunk_index range, inclusive) in document order.';
COMMENT ON COLUMN kb.documents.metadata_origin IS 'Who made summary/doc_type/key_entities/toc: heuristic (deterministic) or llm.';
COMMENT ON COLUMN kb.documents.metadata_sha IS 'content_sha the metadata was made from; regenerated only when content_sha changes.';

-- The edges: typed, directed, with where they came from and why.
ALTER TABLE kb.document_relations
    ADD COLUMN origin text NOT NULL DEFAULT 'link'
        CONSTRAINT document_relations_origin_check CHECK (origin IN ('link', 'mention', 'llm'));
CREATE INDEX document_relations_source_idx ON kb.document_relations (source_id, relation_type);
COMMENT ON COLUMN kb.document_relations.origin IS 'link (a hyperlink), mention (title or file name named in the text) or llm (proposed by a chat model, validated).';
COMMENT ON COLUMN kb.document_relations.evidence IS 'Short text that shows the relation: anchor text, the mentioning sentence, or the model''s reason.';

-- Every hyperlink of a document, resolved to the source_uri it points to, whether or not that
-- document is ingested yet: a link to a document ingested later becomes an edge when it arrives.
CREATE TABLE kb.document_links (
    source_id   uuid NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    target_uri  text NOT NULL CHECK (btrim(target_uri) <> ''),
    href        text NOT NULL,
    anchor      text NOT NULL DEFAULT '',
    PRIMARY KEY (source_id, target_uri)
);
CREATE INDEX document_links_target_idx ON kb.document_links (target_uri);
COMMENT ON TABLE kb.document_links IS 'Hyperlinks as extracted (href as written, target_uri resolved against the linking file, fragment dropped); the ones whose target_uri is an ingested document are also edges in kb.document_relations.';
"""  # noqa: E501 (landed SQL, kept byte for byte)

SCHEMA_DOWN = r"""
DROP TABLE IF EXISTS kb.document_links;
DROP INDEX IF EXISTS kb.document_relations_source_idx;
ALTER TABLE kb.document_relations DROP COLUMN IF EXISTS origin;
DROP INDEX IF EXISTS kb.documents_doc_type_idx;
ALTER TABLE kb.documents
    DROP COLUMN IF EXISTS summary,
    DROP COLUMN IF EXISTS doc_type,
    DROP COLUMN IF EXISTS key_entities,
    DROP COLUMN IF EXISTS toc,
    DROP COLUMN IF EXISTS metadata_origin,
    DROP COLUMN IF EXISTS metadata_sha;
"""

# The functions this revision changes, applied in this order from the store:
# alembic/functions/<name>/0004.sql
FUNCTIONS = (
    "explore_graph",
    "read_document",
)


def upgrade() -> None:
    run_sql(op.get_bind(), SCHEMA_UP)
    upgrade_functions(op, __file__, revision, FUNCTIONS)


def downgrade() -> None:
    downgrade_functions(op, __file__, revision, FUNCTIONS)
    run_sql(op.get_bind(), SCHEMA_DOWN)
