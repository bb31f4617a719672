"""Answers with citations, or an honest "I don't know".

The retrieval step, context building, the prompt, citation checking, extractive answers, the
single-shot answer and the reader agent with its tools.
"""
