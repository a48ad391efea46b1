"""Tests of imagekit.publish."""
