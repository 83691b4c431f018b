"""Slow reference implementations that tests hold the fast paths to."""
