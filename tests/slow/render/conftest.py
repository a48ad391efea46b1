"""Fixtures the slow tests here share with the fast tier's tests of the same module."""

from tests.unit.render.test_wheels import two_machines, wheelhouse  # noqa: F401  (pytest finds fixtures by name here)
