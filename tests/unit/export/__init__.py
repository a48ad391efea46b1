"""Tests of imagekit.export."""
