"""Tests of imagekit.cli."""
