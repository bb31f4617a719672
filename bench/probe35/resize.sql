SET maintenance_work_mem = '5GB';
\timing on
SELECT kb.resize_model_index(1);
