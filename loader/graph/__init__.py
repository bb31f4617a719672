"""The document graph: what each document is (metadata), how documents relate (edges).

``metadata``  deterministic summary, type, key entities and outline of a document;
``links``     hyperlinks and mentions between documents (deterministic edges);
``llm``       the same metadata and typed edges from a chat model, validated, with fallbacks;
``store``     writing all of it in the document's ingestion transaction;
``catalogue`` what the reader agent and ``pgkb ask`` read from the graph.
"""
