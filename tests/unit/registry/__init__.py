"""Tests of imagekit.registry."""
