"""Dataset analysis: token lengths, trimmed lengths, trained tokens and template findings, without a GPU."""
