"""Tests of imagekit.attest."""
