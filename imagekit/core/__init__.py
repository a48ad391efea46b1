"""Shared by every stage: errors, bounds, safe values, paths and atomic writes, the clock, versions,
platforms, names and labels, YAML with line:column."""
