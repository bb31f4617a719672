"""The database: connections, the embedded server, the schema's migrations and named queries."""
