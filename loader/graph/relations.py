"""The relation types of the document graph, defined once.

An edge of ``kb.document_relations`` says how one document relates to another. The table's CHECK
constraint and ``kb.explore_graph`` (``sql_functions/explore_graph.sql``) list the same types in
SQL; ``tests/unit/test_relation_types.py`` checks that they agree with
:data:`RELATION_TYPES`. Imports nothing, so ``pgkb docs graph --help`` stays instant.
"""

from __future__ import annotations

RELATION_TYPES = ("references", "supersedes", "supplements", "contradicts", "depicts")
"""Every ``relation_type`` an edge may have. Links and mentions found in the text are
``references``; a chat model may propose any of them (:mod:`loader.graph.llm`)."""
