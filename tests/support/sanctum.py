"""Helpers for the sanctum tests: fixture sanctums, disk snapshots, a host for the core."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from singularity.config import resolve
from singularity.domain import events
from singularity.domain.identity import identity_from
from singularity.domain.state import AgentState
from singularity.sanctum.extension import SanctumConfig, SanctumCore
from singularity.sanctum.store import SanctumStore
from singularity.sanctum.tools import Context
from singularity.sanctum.wake import wake
from tests.support.loop_http import cli_args

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sanctum"
IDENTITY = ("PERSONA.md", "CREED.md", "BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md")
TODAY = "2026-10-07"


def fixture_sanctum(tmp: Path, *overlays: str, identity: bool = True) -> Path:
    """A copy of the identity fixture with the named overlays laid over it."""
    root = tmp / "sanctum"
    root.mkdir(mode=0o700)
    sources = (["identity"] if identity else []) + list(overlays)
    for name in sources:
        shutil.copytree(FIXTURES / name, root, dirs_exist_ok=True)
    return root


def snapshot(root: Path) -> dict[str, tuple[str, bytes | None, int]]:
    """Every entry below `root`: its kind, its bytes (files) and its mode."""
    found: dict[str, tuple[str, bytes | None, int]] = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base) / name
            info = path.lstat()
            relative = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                found[relative] = ("link", os.readlink(path).encode(), 0)
            elif stat.S_ISDIR(info.st_mode):
                found[relative] = ("dir", None, stat.S_IMODE(info.st_mode))
            else:
                found[relative] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return found


def context(root: Path, day: str = TODAY) -> Context:
    """A tool context over the sanctum at `root`, whose today is `day`."""
    store = SanctumStore(str(root))
    return Context(store, lambda: day, lambda bodies: wake(store, "<sanctum>", bodies=bodies))


def wake_lines(root: Path | None, *, pulse: bool = False) -> list[str]:
    """The wake text of the sanctum at `root` (None: none), labelled `<sanctum>`, as lines."""
    store = SanctumStore(str(root)) if root is not None else None
    try:
        return wake(store, "<sanctum>", pulse=pulse).text.split("\n")
    finally:
        if store is not None:
            store.close()


def identity_lines() -> list[str]:
    """The wake lines of the five fixture identity files."""
    lines: list[str] = []
    for name in IDENTITY:
        body = (FIXTURES / "identity" / name).read_text().rstrip()
        lines += [f"===== {name} =====", *body.split("\n"), ""]
    return lines


@dataclass
class FakeHost:
    """A live being as the sanctum core sees it, with a settable clock and a journal list."""

    state: AgentState
    moment: datetime = datetime(2026, 10, 7, 12, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = field(default_factory=list)
    listeners: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)

    def clock(self) -> datetime:
        return self.moment

    def now(self) -> str:
        return self.moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def journal(self, record: events.ActivityEvent) -> None:
        event = events.encode(record)
        self.events.append(event)
        for listener in self.listeners:
            listener(event)


def fake_core(tmp: Path, **flags: str) -> tuple[SanctumCore, FakeHost]:
    """A sanctum core over `tmp/state/sanctum` for a fresh being named Sage."""
    settings = resolve(
        {
            "state_dir": str(tmp / "state"),
            "agent_name": "Sage",
            "specialty": "bookkeeping",
            **flags,
        },
        environ={},
    )
    state = AgentState.new(
        identity_from(settings), "m", settings.starting_balance, "2026-10-01T00:00:00Z"
    )
    host = FakeHost(state)
    (tmp / "state").mkdir(mode=0o700, exist_ok=True)
    return SanctumCore(host, SanctumConfig.from_settings(settings)), host


def being_args(root: Path, url: str, *extra: str) -> list[str]:
    """`once`/`run` flags for a being named Sage at `root/being` (workspace `root/ws`) on `url`."""
    return cli_args(root, url, "--agent-name", "Sage", *extra)


def sessions_of(root: Path) -> dict[str, str]:
    """The session notes of the being at `root/being`, by name."""
    folder = root / "being" / "sanctum" / "memory" / "sessions"
    return {path.name: path.read_text() for path in sorted(folder.iterdir())}
