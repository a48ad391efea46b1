"""imagekit: build, verify and publish GPU container images for PyTorch from one matrix."""

__version__ = "0.1.0"
