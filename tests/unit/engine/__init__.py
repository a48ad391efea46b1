"""Tests of imagekit.engine."""
