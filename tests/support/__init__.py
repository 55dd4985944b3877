"""Helpers that tests run as real subprocesses."""
