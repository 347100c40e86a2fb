"""THE one place rows are validated (and, with later features, rendered, masked and truncated).

Every job that reads chat rows or preference pairs checks each row with `chat.rows`, by the same rule and in
the same words as the registry applies at upload.
"""
