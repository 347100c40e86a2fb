"""One module per noun group."""
