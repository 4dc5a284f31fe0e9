"""Pure parsers: text in, facts or events out. No file access; callers pass strings."""
