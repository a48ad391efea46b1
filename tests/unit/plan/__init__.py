"""Tests of imagekit.plan."""
