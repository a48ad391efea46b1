"""The report every stage after render reads and writes: the store and its state directory, verification
records and figures, the lock file and its provenance, and the report's text, HTML and JUnit views and
merge."""
