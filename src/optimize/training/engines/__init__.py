"""Training engines: self-contained recipes behind one small interface (prepared rows in, saves and metrics out)."""
