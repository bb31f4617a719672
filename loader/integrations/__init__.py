"""pgkb inside the RAG frameworks: retrievers for LangChain (:mod:`loader.integrations.langchain`,
``pip install 'pgkb[langchain]'``) and LlamaIndex (:mod:`loader.integrations.llamaindex`,
``pip install 'pgkb[llamaindex]'``).

Each framework is imported only by its own module, so pgkb never needs either; both search
through :mod:`loader.integrations.backend` (the database, or a running ``pgkb serve``).
"""
