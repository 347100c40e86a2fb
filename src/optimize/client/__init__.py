"""The typed HTTP client: the only way the CLI (and workers) reach the server."""
