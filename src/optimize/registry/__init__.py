"""The registry: namespaces, datasets (versions, aliases, upload sessions, shards)."""
