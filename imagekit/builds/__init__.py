"""Stage 3, build: the job graph, the bounded abortable builder, bases, what a build asks of the registry,
live progress and the no-change record."""
