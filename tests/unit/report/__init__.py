"""Tests of imagekit.report."""
