"""API tokens and who may do what: issuing, listing, revoking and authenticating tokens."""
