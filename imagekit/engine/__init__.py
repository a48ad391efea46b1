"""The container engine: docker-py, and the raw socket client for the few calls it makes itself."""
