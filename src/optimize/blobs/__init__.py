"""Content-addressed blob storage: objects are keyed by their sha256 only."""
