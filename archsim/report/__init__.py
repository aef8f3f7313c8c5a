"""Stats trees, tables and JSON output."""
