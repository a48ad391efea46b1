"""Tests of imagekit.facts."""
