"""A being's sanctum in PostgreSQL: versioned rows, every write a new version.

`singularity.sanctum_files` holds one row per version of an entry: a file's bytes, a
folder (its path ends in `/`, its content is empty), a removal (content NULL) or, since
`0010_sanctum_appends`, the bytes an append added to the file (`appended`). The sanctum
as it stands is the latest version of every path that was not removed: a file's bytes
are those of its newest version not appended, followed by the appends since, in order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

from singularity.errors import StateError
from singularity.sanctum.entries import SanctumEntry
from singularity.state_place import shown_url
from singularity.store.postgres.store import Batch, connect

LATEST_VERSIONS = """
SELECT path, max(version) AS version,
    string_agg(content, ''::bytea ORDER BY version) AS content,
    (array_agg(written_at ORDER BY version DESC))[1] AS written_at
FROM (
    SELECT path, version, content, written_at,
        max(version) FILTER (WHERE NOT appended) OVER (PARTITION BY path) AS whole
    FROM singularity.sanctum_files WHERE agent_id = %s
) AS versions
WHERE version >= whole
GROUP BY path ORDER BY path
"""
"""Per path of the being `%s`, its latest version's number, its content (NULL for a
removal) and when it was written: the content of its newest version that is not an
append, followed by the appends since."""
LATEST = f"""
SELECT path, content FROM ({LATEST_VERSIONS}) AS latest
WHERE content IS NOT NULL ORDER BY path
"""
ADD = """
INSERT INTO singularity.sanctum_files (agent_id, path, version, content)
SELECT entry.agent_id, entry.path, COALESCE((
    SELECT max(version) FROM singularity.sanctum_files AS held
    WHERE held.agent_id = entry.agent_id AND held.path = entry.path
), 0) + 1, entry.content
FROM (VALUES {values}) AS entry (agent_id, path, content)
"""


def latest(db: psycopg.Connection[Any], agent_id: str) -> list[SanctumEntry] | None:
    """The being's sanctum as it stands, parents first; None when it has none."""
    found = db.execute(LATEST, (agent_id,)).fetchall()
    if not found:
        return None
    return [
        SanctumEntry(path) if path.endswith("/") else SanctumEntry(path, bytes(content))
        for path, content in found
    ]


def add_versions(batch: Batch, agent_id: str, entries: Sequence[SanctumEntry]) -> None:
    """Add to the step a new version of each entry."""
    if not entries:
        return
    for entry in entries:
        entry.parts()  # a path that would leave the sanctum is refused before it is stored
    values = ", ".join(["(%s, %s, %s::bytea)"] * len(entries))
    parameters = [
        value
        for entry in entries
        for value in (agent_id, entry.path, entry.content if entry.content is not None else b"")
    ]
    batch.execute(ADD.format(values=values), parameters)


def peek_sanctum(url: str, agent_id: str) -> list[SanctumEntry]:
    """The sanctum of the being `agent_id` in the store at `url`, read without its lease.

    StateError when the store holds no such being, or the being no sanctum.
    """
    label = f"being {agent_id} in {shown_url(url)}"
    db = connect(url)
    try:
        if db.execute("SELECT to_regclass('singularity.beings')").fetchone() in (None, (None,)):
            raise StateError(f"no {label}")
        being = db.execute(
            "SELECT 1 FROM singularity.beings WHERE agent_id = %s", (agent_id,)
        ).fetchone()
        if being is None:
            raise StateError(f"no {label}")
        found = latest(db, agent_id)
    except psycopg.Error as error:
        raise StateError(f"cannot read the sanctum of {label}: {error}") from None
    finally:
        with contextlib.suppress(psycopg.Error):
            db.close()
    if found is None:
        raise StateError(f"the {label} has no sanctum")
    return found
