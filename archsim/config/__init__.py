"""Strict config loading: presets + overrides, every error names the file and dotted path."""
