"""Tests of the front ends' files (imagekit/frontends)."""
