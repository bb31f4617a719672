"""The models pgkb calls: embeddings (local or OpenAI-compatible) and chat, over one
OpenAI-compatible layer (:mod:`loader.providers.openai_compat`)."""
