"""pgkb: a knowledge base inside PostgreSQL (the loader and CLI package)."""

__version__ = "0.1.0"
