"""Tests of imagekit.k8s."""
