"""Stage 4, verify: the probe's invocation and verdict (free of docker-py), the harness that runs it in a
locked-down container, the GPU request and the schedule of check passes."""
