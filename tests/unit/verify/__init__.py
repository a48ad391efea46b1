"""Tests of imagekit.verify."""
