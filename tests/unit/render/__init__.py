"""Tests of imagekit.render."""
