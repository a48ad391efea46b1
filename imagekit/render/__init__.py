"""Stage 2, render: a Plan to Dockerfiles and build contexts (recipes, wheel closures, templates and their
compiled code, drift, the probe zipapp and where it lives in an image)."""
