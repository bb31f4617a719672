"""The heading path in pg_textsearch's bm25 index, measured on the keyword leg alone: recall@5
and MRR@10 of the documents each variant ranks (50 chunks, deduplicated by source).

    python bench/keyword_heading_probe.py URL QUESTIONS.json [beir:DIR:QRELS.tsv ...]

Variants: the SQL BM25 (heading weight 1, and 2); kb.keyword_search on pg_textsearch (today's
index: one expression, heading_path || ' ' || content); and, bare ORDER BY ... LIMIT 50 on
indexes this probe adds to the (single) collection with chunks: the same expression (h+c), the
heading twice (h+h+c: weight 2 in one index), and two indexes, content and heading, their
scores summed over the union of both top 50 (c + h: a second index). A probe: deleted after
use, kept in git."""

import json
import sys
from pathlib import Path

import psycopg

EXPR = {
    "h+c": "(heading_path || ' ' || content)",
    "h+h+c": "(heading_path || ' ' || heading_path || ' ' || content)",
    "c": "(content)",
    "h": "(heading_path)",
}


def questions(spec):
    if not spec.startswith("beir:"):
        items = json.loads(Path(spec).read_text())
        return [(q["id"], q["question"], q["sources"], True) for q in items if q.get("sources")]
    _, folder, qrels = spec.split(":")
    rel = {}
    for line in Path(qrels).read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")[:3]
        if int(score) > 0:
            rel.setdefault(qid, []).append(doc)
    texts = {}
    for line in (Path(folder) / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        texts[q["_id"]] = q["text"]
    return [(qid, texts[qid], docs, False) for qid, docs in rel.items() if qid in texts]


def main(url, specs):
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SET enable_seqscan = off")
        ext = c.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'pg_textsearch'"
        ).fetchone()[0]
        (coll,) = c.execute(
            "SELECT collection FROM kb.collection_stats WHERE chunk_count > 0"
        ).fetchone()
        prod = "kb." + c.execute("SELECT kb.keyword_index_name(%s)", (coll,)).fetchone()[0]
        c.execute("DROP INDEX IF EXISTS kb.probe_bm25_h_c")
        for key, expr in EXPR.items():
            if key == "h+c":  # today's index: a duplicate would make the planner choose
                continue
            name = "probe_bm25_" + key.replace("+", "_")
            c.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON kb.chunks USING bm25 ({expr}) WITH "
                "(text_config = 'english', k1 = 0.9, b = 0.75) WHERE collection = %s"
                % psycopg.sql.Literal(coll).as_string(c)
            )

        def bare(key, q, n=50):
            e, idx = EXPR[key], "kb.probe_bm25_" + key.replace("+", "_")
            idx = prod if key == "h+c" else idx
            return c.execute(
                f"SELECT c.id, c.{e[1:-1]} OPERATOR({ext}.<@>) {ext}.to_bm25query(%s, %s) s, "
                "d.source_uri FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id "
                f"WHERE c.collection = %s ORDER BY {e} OPERATOR({ext}.<@>) "
                f"{ext}.to_bm25query(%s, %s) LIMIT %s",
                (q, idx, coll, q, idx, n),
            ).fetchall()

        def two(q):
            rows = {r[0]: r[2] for r in bare("c", q) + bare("h", q)}
            if not rows:
                return []
            scored = c.execute(
                f"SELECT c.id, (c.content OPERATOR({ext}.<@>) {ext}.to_bm25query(%s, "
                f"'kb.probe_bm25_c')) + (c.heading_path OPERATOR({ext}.<@>) "
                f"{ext}.to_bm25query(%s, 'kb.probe_bm25_h')) s FROM kb.chunks c "
                "WHERE c.id = ANY(%s) ORDER BY 2, 1 LIMIT 50",
                (q, q, list(rows)),
            ).fetchall()
            return [rows[i] for i, _ in scored]

        def search(backend, q, weight=1.0):
            c.execute("SELECT set_config('pgkb.keyword_backend', %s, false)", (backend,))
            return [
                r[0]
                for r in c.execute(
                    "SELECT source_uri FROM kb.keyword_search(%s, 50, '{}', NULL, 'bm25', 0.9, "
                    "0.75, %s)",
                    (q, weight),
                )
            ]

        variants = {
            "sql": lambda q: search("sql", q),
            "sql hw2": lambda q: search("sql", q, 2.0),
            "pgts": lambda q: search("pg_textsearch", q),
            "h+c": lambda q: [r[2] for r in bare("h+c", q)],
            "h+h+c": lambda q: [r[2] for r in bare("h+h+c", q)],
            "c + h": two,
        }
        for spec in specs:
            qs = questions(spec)
            ranks = {v: {} for v in variants}
            out = {}
            for v, fn in variants.items():
                r5 = mrr = 0.0
                for qid, text, sources, suffix in qs:
                    docs = list(dict.fromkeys(fn(text)))

                    def hit(u, s, suffix=suffix):
                        return u.endswith(s) if suffix else u == s

                    rel = [i for i, u in enumerate(docs[:10]) if any(hit(u, s) for s in sources)]
                    r5 += len({s for s in sources if any(hit(u, s) for u in docs[:5])}) / len(
                        sources
                    )
                    mrr += 1 / (rel[0] + 1) if rel else 0
                    ranks[v][qid] = rel[0] + 1 if rel else None
                out[v] = (round(r5 / len(qs), 3), round(mrr / len(qs), 3))

            def top5(v, qid, ranks=ranks):
                return ranks[v][qid] is not None and ranks[v][qid] <= 5

            moved = {
                v: (
                    sum(top5("sql", q) and not top5(v, q) for q in ranks["sql"]),
                    sum(top5(v, q) and not top5("sql", q) for q in ranks["sql"]),
                )
                for v in variants
                if v != "sql"
            }
            print(json.dumps({"set": spec, "questions": len(qs), "r5_mrr": out, "lost_won": moved}))
        for key in ("h+h+c", "c", "h"):
            c.execute("DROP INDEX kb.probe_bm25_" + key.replace("+", "_"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
