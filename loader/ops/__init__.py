"""Operating the knowledge base: stats, staleness and removal, model changes, index care,
doctor, roles for services. Each module is a thin layer over SQL functions in
``sql_functions/``; the few other statements it sends are named constants at its top."""
