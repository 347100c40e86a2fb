"""The `akka` command line: one module per noun group, text (Rich) and JSON output."""
