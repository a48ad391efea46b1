"""Tests of imagekit.builds."""
