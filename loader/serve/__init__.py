"""pgkb as a warm process: the MCP server (``pgkb mcp``) and the HTTP service (``pgkb serve``).

Both wrap one :class:`~loader.serve.service.KnowledgeService`: a ``psycopg_pool`` connection pool
whose connections only read, the embedding model loaded once, and an optional category scope
that every call passes to the SQL functions. ``loader.serve.mcp`` and ``loader.serve.http`` only
translate their protocol into its calls.
"""
