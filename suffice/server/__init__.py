"""``suffice serve``: the gates as an HTTP service beside a RAG application."""
