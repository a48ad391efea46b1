"""Kubernetes: Job manifests, validate-on Jobs per GPU product and their results, admission policies. Imports
no docker-py."""
