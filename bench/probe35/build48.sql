SET maintenance_work_mem = '5GB';
SET max_parallel_maintenance_workers = 2;
\timing on
CREATE INDEX embeddings_hnsw_probe48 ON kb.embeddings USING hnsw (((embedding)::vector(384)) vector_cosine_ops) WITH (m = 48, ef_construction = 200) WHERE (model_id = 1);
