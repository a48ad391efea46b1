"""Other build systems: CI targets, bake import, the matrix formats, container-structure-test."""
