"""Stage 5, publish: promotion by digest into final tags and image indexes, and its policy."""
