"""Singularity: a runtime for persistent, self-modifying autonomous digital beings."""

__version__ = "0.1.0"
