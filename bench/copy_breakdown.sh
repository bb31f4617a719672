#!/bin/bash
# Where COPY time goes: the chunks of a corpus built by bench/scale_bench.py --keep, loaded again
# into an empty pgkb schema three times: with this checkout's statistics trigger, with the one of
# git revision $3 (default main), and with no trigger at all (tsvector, GIN and B-trees only).
#
#   bench/copy_breakdown.sh SOURCE_URL ADMIN_URL [REVISION]
#
# SOURCE_URL: e.g. the pgkb_scale_100000 database; ADMIN_URL: a database of the same server
# (a scratch database pgkb_copybrk is created there and dropped).
set -euo pipefail
src=$1
admin=$2
rev=${3:-main}
dst=$(python -c "import sys; from tests.helpers import with_dbname; print(with_dbname(sys.argv[1], 'pgkb_copybrk'))" "$admin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
psql "$admin" -qc "DROP DATABASE IF EXISTS pgkb_copybrk" -c "CREATE DATABASE pgkb_copybrk"
PGKB_DATABASE_URL=$dst pgkb db upgrade
git show "$rev:sql_functions/chunks_maintain_stats.sql" > "$tmp/old_trigger.sql"
psql "$src" -qc "\copy (SELECT id, source_uri, title, content_sha, category FROM kb.documents) TO '$tmp/docs.tsv'"
psql "$src" -qc "\copy (SELECT document_id, chunk_index, heading_path, content, content_sha, token_count FROM kb.chunks ORDER BY id) TO '$tmp/chunks.tsv'"
psql "$dst" -qc "\copy kb.documents (id, source_uri, title, content_sha, category) FROM '$tmp/docs.tsv'"
reset="TRUNCATE kb.chunks CASCADE; TRUNCATE kb.term_stats, kb.term_postings; UPDATE kb.corpus_stats SET chunk_count = 0, total_lexemes = 0; CHECKPOINT;"
for variant in this "$rev" none; do
  psql "$dst" -q -c "SET client_min_messages = warning" -c "$reset"
  case $variant in
    this) ;;
    none) psql "$dst" -qc "ALTER TABLE kb.chunks DISABLE TRIGGER USER" ;;
    *) psql "$dst" -q -f "$tmp/old_trigger.sql" ;;
  esac
  start=$(date +%s.%N)
  psql "$dst" -qc "\copy kb.chunks (document_id, chunk_index, heading_path, content, content_sha, token_count) FROM '$tmp/chunks.tsv'"
  end=$(date +%s.%N)
  echo "trigger $variant: $(echo "$end - $start" | bc) s; kb.term_postings rows: $(psql "$dst" -Atc 'SELECT count(*) FROM kb.term_postings')"
done
psql "$admin" -qc "DROP DATABASE pgkb_copybrk"
