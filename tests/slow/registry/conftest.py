"""Fixtures the slow tests here share with the fast tier's tests of the same module."""

from tests.unit.registry.test_client import stub  # noqa: F401  (pytest finds fixtures by name here)
