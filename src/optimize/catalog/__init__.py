"""The base-model catalog: entries, envelopes, devices they serve on, and the offline stand-in models."""
