"""Tests of imagekit.build."""
