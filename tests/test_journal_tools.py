"""The journal's tools as a being calls them: limits, promotion targets, events, the mood line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.domain.events import PulseStarted
from singularity.journal import reasonlog
from singularity.journal.extension import (
    JournalExtension,
    fingerprint_of,
    journal_config,
    journal_extension,
)
from singularity.runtime.being import LiveBeing, open_being
from singularity.tools.base import Outcome, Status
from singularity.tools.output_boundary import OutputBoundary


@pytest.fixture
def part(tmp_path: Path) -> Iterator[JournalExtension]:
    (tmp_path / "ws").mkdir()
    settings = resolve(
        {
            "state_dir": str(tmp_path / "being"),
            "workspace": str(tmp_path / "ws"),
            "journal_embedder": "hashing",
        },
        environ={},
    )
    being = open_being(settings)
    being.save()
    extension = journal_extension(being, settings)
    yield extension
    asyncio.run(extension.at_stop())
    being.close()


def call(part: JournalExtension, name: str, **arguments: Any) -> Outcome:
    [toolset] = part.toolsets()
    return asyncio.run(toolset.call(f"singularity_{name}", arguments))


def events(being: LiveBeing) -> list[dict[str, Any]]:
    """The journal once the step in progress is durable, as the runtime's next save makes it."""
    being.save()
    path = Path(being.statedir.path) / "activity.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_journal_tools_are_private_and_the_reasonlog_is_public(part: JournalExtension) -> None:
    [toolset] = part.toolsets()
    assert {d.name: d.private for d in toolset.definitions()} == {
        "singularity_journal_write": True,
        "singularity_journal_recall": True,
        "singularity_journal_promote": True,
        "singularity_reasonlog_append": False,
    }


def test_no_journal_exists_until_the_first_write(part: JournalExtension) -> None:
    state_dir = Path(part.being.statedir.path)
    asyncio.run(part.at_boot())
    assert not (state_dir / "journal.key").exists()
    assert call(part, "journal_write", text="first words").status is Status.SUCCESS
    assert (state_dir / "journal.key").stat().st_mode & 0o777 == 0o600
    for name in ("journal.sqlite3", "journal.sqlite3-wal"):
        assert (state_dir / name).stat().st_mode & 0o777 == 0o600


def test_write_limits(part: JournalExtension) -> None:
    long = call(part, "journal_write", text="é" * 2049)
    assert long.status is Status.FAILED and long.error_code == "entry_too_long"
    assert "4098 bytes" in long.content["message"] and "thread_id" in long.content["message"]
    assert call(part, "journal_write", text="x" * 4096).status is Status.SUCCESS
    multiline = call(part, "journal_write", text="line one\nline two\ttabbed")
    assert multiline.status is Status.SUCCESS
    for bad in ({"text": ""}, {"text": "a\x00b"}, {"text": 5}, {"text": "ok", "mood": "Very Sad"}):
        outcome = call(part, "journal_write", **bad)
        assert outcome.error_code == "invalid_arguments", bad
    threaded = [call(part, "journal_write", text=f"part {i}", thread_id="plan-a") for i in range(3)]
    assert [o.content["seq"] for o in threaded] == [1, 2, 3]


def test_redaction_blanks_and_says_why(part: JournalExtension) -> None:
    outcome = call(part, "journal_write", text="the admin password=letmein123 works", mood="sly")
    assert outcome.status is Status.SUCCESS
    assert outcome.content["redacted"] is True and outcome.content["categories"] == ["password"]
    added = [e for e in events(part.being) if e["type"] == "journal_entry_added"]
    assert added[-1] == {**added[-1], "mood": "sly", "redacted": True}


def test_recall_bounds_and_events(part: JournalExtension) -> None:
    for text in ("the river was loud", "the market fell", "a quiet river bend"):
        call(part, "journal_write", text=text)
    for k in (0, 21, "5", True):
        assert call(part, "journal_recall", query="river", k=k).error_code == "invalid_arguments"
    assert call(part, "journal_recall", query="q" * 1025).error_code == "too_long"
    outcome = call(part, "journal_recall", query="river bend", k=2)
    entries = outcome.content["entries"]
    assert len(entries) == 2 and entries[0]["text"] == "a quiet river bend"
    recalled = [e for e in events(part.being) if e["type"] == "journal_recalled"][-1]
    assert recalled["k"] == 2 and recalled["ids"] == [e["entry_id"] for e in entries]
    assert "text" not in json.dumps(recalled)


@pytest.mark.parametrize("target", ["reasonlog", "learning", "memory"])
def test_promotion_targets(part: JournalExtension, target: str) -> None:
    being = part.being
    entry = call(part, "journal_write", text="I keep retrying failed calls too fast").content[
        "entry_id"
    ]
    summary = "Back off between retries of a failing call."
    outcome = call(part, "journal_promote", entry_id=entry, summary=summary, target=target)
    assert outcome.status is Status.SUCCESS, outcome
    ref = outcome.content["ref"]
    assert ref.startswith(target + ":")
    if target == "reasonlog":
        [line] = reasonlog.read(being.statedir.path)
        assert line["thought"] == summary and line["source"] == "journal"
        assert line["journal_entry_id"] == entry and ref == f"reasonlog:{line['id']}"
    elif target == "learning":
        assert being.state.mind.learnings == [summary]
    else:
        assert [(m.kind, m.text) for m in being.state.mind.memories] == [("reflection", summary)]
    journal = part.journal(create=False)
    assert journal is not None
    row = journal.store.rows(ids=[entry])[0]
    assert row.promoted and row.promoted_ref == ref
    promoted = [e for e in events(being) if e["type"] == "journal_promoted"]
    assert promoted == [{**promoted[0], "id": entry, "target": target, "ref": ref}]


def test_promotion_refusals(part: JournalExtension) -> None:
    entry = call(part, "journal_write", text="a thought").content["entry_id"]
    assert call(
        part, "journal_promote", entry_id=entry, summary="s", target="sanctum"
    ).error_code == ("invalid_arguments")
    leaky = call(part, "journal_promote", entry_id=entry, summary="ask bob@example.com")
    assert leaky.error_code == "summary_redacted"
    assert call(part, "journal_promote", entry_id="nope", summary="s").error_code == "unknown_entry"
    assert (
        call(part, "journal_promote", entry_id=entry, summary="x" * 2049).error_code == "too_long"
    )
    assert reasonlog.read(part.being.statedir.path) == []


def test_reasonlog_append_is_public_and_bounded(part: JournalExtension) -> None:
    outcome = call(
        part, "reasonlog_append", thought="Chose the cheaper model", relevance=0.8, risk=0.125
    )
    [line] = reasonlog.read(part.being.statedir.path)
    assert line["id"] == outcome.content["id"] and (line["relevance"], line["risk"]) == (0.8, 0.12)
    assert list(line)[:9] == [
        "id",
        "timestamp",
        "decision_context",
        "step_index",
        "thought",
        "relevance",
        "risk",
        "predicted_outcome",
        "source",
    ]
    assert call(part, "reasonlog_append", thought="t", risk=1.5).error_code == "invalid_arguments"


def test_the_mood_line(part: JournalExtension) -> None:
    assert part.prompt_section() == ""
    call(part, "journal_write", text="long day", mood="tired")
    assert part.prompt_section() == "\n\nCurrent mood: tired"


def test_purge_at_boot_hourly_and_before_every_pulse(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    settings = resolve(
        {
            "state_dir": str(tmp_path / "b"),
            "workspace": str(tmp_path / "ws"),
            "journal_embedder": "hashing",
        },
        environ={},
    )
    now = [datetime(2026, 6, 1, tzinfo=UTC)]
    being = open_being(settings, clock=lambda: now[0])
    being.save()
    part = JournalExtension(
        being,
        journal_config(settings, fingerprint_of(being.state)),
        being.clock,
        OutputBoundary.from_settings(settings),
    )
    being.listeners.append(part.watch)
    try:
        asyncio.run(part.at_boot())
        call(part, "journal_write", text="first")
        now[0] += timedelta(minutes=10)
        call(part, "journal_write", text="second")
        now[0] += timedelta(days=30, minutes=-5)  # the first is 30 days 5 minutes old
        asyncio.run(part.before_cycle())
        purged = [e["count"] for e in events(being) if e["type"] == "journal_purged"]
        assert purged == [1]
        now[0] += timedelta(minutes=15)  # the second has expired too, but the hour is not up
        asyncio.run(part.before_cycle())
        journal = part.journal(create=False)
        assert journal is not None and journal.store.count() == 1
        being.journal(PulseStarted(being.now(), 1, 8, Decimal("0.10")))
        asyncio.run(part.before_cycle())
        assert journal.store.count() == 0
        assert [e["count"] for e in events(being) if e["type"] == "journal_purged"] == [1, 1]
    finally:
        asyncio.run(part.at_stop())
        being.close()
