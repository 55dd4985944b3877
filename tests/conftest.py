"""Shared test fixtures."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _private_umask() -> None:
    """Tests run with a permissive umask so permission code is really exercised."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)
