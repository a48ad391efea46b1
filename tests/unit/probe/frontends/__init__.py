"""Tests of the in-image probe package."""
