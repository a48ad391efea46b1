"""Tests of imagekit.core."""
