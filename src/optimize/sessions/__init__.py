"""Sessions: raw conversation corpora (OASST1 message trees, OpenTelemetry GenAI log events, captured model calls)
parsed into candidate conversations, kept as one content-addressed blob per session, for a curation to judge.

The parsers (`oasst1`, `otel`, `canonical`, on the common `candidates` model) are pure: bytes in, candidates and
counts out, a bad line refused by its number. `service` stores a session and reads it back."""
