"""The docs: links resolve, named tests exist, runnable snippets run as written."""
