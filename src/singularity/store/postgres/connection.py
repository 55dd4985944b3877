"""The one way Singularity connects to a PostgreSQL server.

The state store (`store/postgres/`) and the journal's PostgreSQL backend
(`journal/pg_link.py`) may share a server; they connect with the same settings here (an
autocommit connection, the same time to wait for the server), warn alike when the
server may lose committed writes, and say alike that they could not connect (the URL
shown without its password).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from singularity.state_place import shown_url

log = logging.getLogger(__name__)
Connection = psycopg.Connection[Any]
CONNECT_TIMEOUT_SECS = 10
"""How long one connection attempt waits for the server before it fails."""
DURABILITY_SETTINGS = ("fsync", "synchronous_commit")


def open_connection(url: str) -> Connection:
    """An autocommit connection to the server `url` names; a `psycopg.Error` propagates
    (the journal's link retries on it)."""
    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECS)


def connect_failure(what: str, url: str, error: psycopg.Error) -> str:
    """The message for a connection to `what` (the state store, the journal database)
    that could not be opened."""
    return f"cannot connect to {what} {shown_url(url)}: {error}"


def warn_unless_durable(db: Connection, what: str) -> None:
    """Log a warning when the server runs with a setting that loses committed writes."""
    for setting in DURABILITY_SETTINGS:
        row = db.execute(f"SHOW {setting}").fetchone()
        if row is not None and row[0] == "off":
            log.warning("%s runs with %s=off: committed writes may be lost", what, setting)
