"""The `singularity` command line (spec §17, §15.5): outputs, error lines and exit codes.

Contract: `tools` lists the built-in definitions (`name<TAB>description` lines, or a
pretty JSON array); `show` summarizes a being; `verify` prints `ok` or every problem and
exits 4; `import` prints the pretty report and, when refused, also fails with the exact
refusal line. Every failure is one stderr line `singularity: <error>` and the exit code
of its class (4 for state errors).

Most cases run the installed console script as a real subprocess; variants that only
differ in input run `main()` in-process, which is the same code path.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.domain.mind import initial_prompt
from singularity.domain.records import ActionRecord, MemoryEntry, Source
from singularity.domain.state import AgentState
from singularity.jsoncodec import pretty
from singularity.runtime.being import open_being
from singularity.runtime.inspect.catalogue import part_definitions
from singularity.runtime.mind_import.apply import import_offline
from tests.support.commands import SINGULARITY
from tests.support.loop_http import make_cli

FIXTURES = Path(__file__).parent / "fixtures" / "import"
ZEROS = "0" * 64

# Spec §10.1: the built-ins in catalogue order, and every built-in description.
BUILTIN_ORDER = [
    "singularity_memory_remember",
    "singularity_memory_recall",
    "singularity_self_set_prompt",
    "singularity_self_add_rule",
    "singularity_self_add_learning",
    "singularity_self_switch_model",
    "singularity_spawn_child",
    "singularity_file_read",
    "singularity_file_write",
]
DESCRIPTIONS = {
    "most_health": "Check Most messaging readiness and active backends",
    "most_create_chat": "Create a Most chat and send its first text message",
    "most_send_message": "Send a text message to an existing Most chat",
    "singularity_memory_remember": "Persist a memory owned by this digital being",
    "singularity_memory_recall": "Recall persistent memories containing a query",
    "singularity_self_set_prompt": "Replace this being's persistent system prompt",
    "singularity_self_add_rule": "Add a persistent self-imposed rule",
    "singularity_self_add_learning": "Record a persistent learning that changes future decisions",
    "singularity_self_switch_model": (
        "Switch future cognition calls to another available Brama model"
    ),
    "singularity_spawn_child": "Create and start a child digital being with separate state",
    "singularity_file_read": "Read one UTF-8 file inside the configured workspace",
    "singularity_file_write": (
        "Atomically create or replace one UTF-8 file inside the configured workspace"
    ),
}


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """The console script as a subprocess, with a clean environment."""
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        **(env or {}),
    }
    completed = subprocess.run(
        [str(SINGULARITY), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    return Result(completed.returncode, completed.stdout, completed.stderr)


@pytest.fixture
def in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """`main()` in this process, in `tmp_path`, with no option variables set."""
    return make_cli(tmp_path, monkeypatch, capsys)


def make_being(path: Path, change: Callable[[AgentState], None] | None = None) -> AgentState:
    """A saved being named Ada at `path`."""
    flags = {
        "state_dir": str(path),
        "agent_name": "Ada",
        "agent_ticker": "ADA",
        "specialty": "number theory",
    }
    being = open_being(resolve(flags, config_file=os.devnull, environ={}))
    if change is not None:
        change(being.state)
    being.save()
    being.close()
    return being.state


def files(path: Path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


# --- tools ----------------------------------------------------------------------------


def _schema(*keys: str, required: int | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: {"type": "string"} for key in keys},
        "required": list(keys[:required]),
        "additionalProperties": False,
    }


# Spec §10.1 with §11 and §14 (plus the optional `budget` of decision 17).
BUILTIN_PARAMETERS = {
    "singularity_memory_remember": _schema("kind", "text"),
    "singularity_memory_recall": _schema("query"),
    "singularity_self_set_prompt": _schema("prompt"),
    "singularity_self_add_rule": _schema("rule"),
    "singularity_self_add_learning": _schema("learning"),
    "singularity_self_switch_model": _schema("model"),
    "singularity_spawn_child": _schema("name", "ticker", "specialty", "budget", required=3),
    "singularity_file_read": _schema("path"),
    "singularity_file_write": _schema("path", "content"),
}


def test_tools_table(tmp_path: Path) -> None:
    result = run(tmp_path, "tools", "--format", "table")
    assert (result.code, result.err) == (0, "")
    parts = "".join(f"{d.name}\t{' '.join(d.description.split())}\n" for d in part_definitions())
    builtins = "".join(f"{name}\t{DESCRIPTIONS[name]}\n" for name in BUILTIN_ORDER)
    assert result.out == builtins + parts  # the sanctum's and the journal's after the built-ins
    assert len(result.out.splitlines()) == 24
    assert result.out.startswith(
        "singularity_memory_remember\tPersist a memory owned by this digital being\n"
        "singularity_memory_recall\tRecall persistent memories containing a query\n"
    )


def test_tools_json(in_process: Callable[..., Result]) -> None:
    result = in_process("tools", "--format", "json")
    assert (result.code, result.err) == (0, "")
    expected = [
        {"name": name, "description": DESCRIPTIONS[name], "parameters": BUILTIN_PARAMETERS[name]}
        for name in BUILTIN_ORDER
    ] + [
        {"name": d.name, "description": d.description, "parameters": d.parameters}
        for d in part_definitions()
    ]
    assert result.out == pretty(expected) + "\n"
    assert result.out.startswith(
        "[\n"
        "  {\n"
        '    "name": "singularity_memory_remember",\n'
        '    "description": "Persist a memory owned by this digital being",\n'
        '    "parameters": {\n'
        '      "type": "object",\n'
        '      "properties": {\n'
        '        "kind": {\n'
        '          "type": "string"\n'
        "        },\n"
    )
    assert in_process("tools").out == result.out  # json is the default


def test_tools_refuses_an_unknown_format(in_process: Callable[..., Result]) -> None:
    result = in_process("tools", "--format", "yaml")
    assert result.code == 2
    assert result.out == ""


# --- show -----------------------------------------------------------------------------


def test_show_text(tmp_path: Path) -> None:
    make_being(tmp_path / "being")
    result = run(tmp_path, "show", "--state-dir", "being")
    assert (result.code, result.err) == (0, "")
    prompt_bytes = len(initial_prompt("Ada", "number theory").encode("utf-8"))
    assert result.out.splitlines() == [
        "Ada (ADA), specialized in number theory; agent local",
        "status starting, cycle 0, model any",
        "balance 10 USD of 10 (earned 0, spent 0 on tokens and 0 on instance time, "
        "0 to children; 0 tokens)",
        f"mind: prompt {prompt_bytes} bytes, 0 rules, 0 learnings, 0 memories, 0 children; "
        "conversation 0 messages",
        "sanctum: none yet",
        "journal: none yet",
    ]


def test_show_text_with_memories_and_actions(in_process: Callable[..., Result]) -> None:
    def grow(state: AgentState) -> None:
        state.mind.memories.append(
            MemoryEntry(
                id="00000000-0000-4000-8000-000000000001",
                kind="fact",
                text="[bold]not markup[/bold]",
                created_at="2026-01-01T00:00:00Z",
                sources=[],
            )
        )
        state.record_action(
            ActionRecord(
                cycle=1,
                tool="singularity_self_add_rule",
                status="failed",
                at="2026-01-01T00:00:01Z",
            )
        )

    make_being(Path("being"), grow)
    result = in_process("show", "--state-dir", "being")
    assert result.code == 0
    lines = result.out.splitlines()
    assert "recent actions: singularity_self_add_rule:failed" in lines
    assert "[bold]not markup[/bold]" in result.out  # data is never read as markup
    assert "1 memories" in result.out


def test_show_json(tmp_path: Path, in_process: Callable[..., Result]) -> None:
    imported = Source(kind="notes", source_id="s", item_id="i")

    def grow(state: AgentState) -> None:
        for index in range(7):
            state.mind.memories.append(
                MemoryEntry(
                    id=f"00000000-0000-4000-8000-00000000000{index}",
                    kind="note",
                    text=f"memory {index}",
                    created_at=f"2026-01-01T00:00:0{index}Z",
                    sources=[imported] if index == 6 else [],
                )
            )
        state.mind.rules.append("stay solvent")

    state = make_being(tmp_path / "being", grow)
    result = in_process("show", "--json", "--state-dir", "being")
    assert (result.code, result.err) == (0, "")
    saved = json.loads((tmp_path / "being" / "state.json").read_text("utf-8"))
    expected = {
        "identity": {
            "agent_id": "local",
            "name": "Ada",
            "ticker": "ADA",
            "agent_type": "general",
            "specialty": "number theory",
            "role": "being",
            "environment": "local",
            "host": "localhost",
            "workload_id": "local",
            "workload_public_key": ZEROS,
            "executable_digest": ZEROS,
            "code_digest": ZEROS,
            "policy_digest": ZEROS,
            "policy_sequence": 0,
        },
        "status": "starting",
        "cycle": 0,
        "current_model": "any",
        "budget": {
            "starting": "10",
            "remaining": "10",
            "earned": "0",
            "api_spent": "0",
            "instance_spent": "0",
            "children_funded": "0",
            "operator_credited": "0",
            "net_profit": "0",
            "total_tokens": 0,
        },
        "mind": {
            "system_prompt_bytes": len(state.mind.system_prompt.encode("utf-8")),
            "rules": 1,
            "learnings": 0,
            "memories": 7,
            "children": 0,
        },
        "newest_memories": [
            {"kind": "note", "text": f"memory {i}", "created_at": f"2026-01-01T00:00:0{i}Z"}
            for i in (6, 5, 4, 3, 2)
        ],
        "children": [],
        "conversation_messages": 0,
        "recent_actions": [],
        "started_at": saved["started_at"],
        "updated_at": saved["updated_at"],
        "sanctum": {"path": str(tmp_path / "being" / "sanctum"), "born": False},
        "journal": {"state": "none"},
    }
    assert result.out == pretty(expected) + "\n"


def test_show_missing_directory(tmp_path: Path) -> None:
    result = run(tmp_path, "show", "--state-dir", "nowhere")
    assert result == Result(
        4, "", "singularity: state: no being state exists at nowhere/state.json\n"
    )
    assert not (tmp_path / "nowhere").exists()


def test_show_reads_the_state_dir_variable(
    monkeypatch: pytest.MonkeyPatch, in_process: Callable[..., Result]
) -> None:
    make_being(Path("elsewhere"))
    monkeypatch.setenv("SINGULARITY_STATE_DIR", "elsewhere")
    result = in_process("show")
    assert result.code == 0
    assert result.out.startswith("Ada (ADA)")


# --- verify ---------------------------------------------------------------------------


def test_verify_a_fresh_being(tmp_path: Path) -> None:
    make_being(tmp_path / "being")
    before = files(tmp_path / "being")
    assert run(tmp_path, "verify", "being") == Result(0, "being: ok\n", "")
    assert files(tmp_path / "being") == before


def test_verify_lists_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "broken"
    make_being(path)
    os.chmod(path, 0o755)
    os.chmod(path / "state.json", 0o644)
    temp = ".state-0a1b2c3d-0000-4000-8000-000000000000.tmp"
    (path / temp).write_bytes(b"{")
    with open(path / "activity.jsonl", "ab") as journal:
        journal.write(b"not json\n")
        journal.write(b'{"type":"started","at":"2026-01-01T00:00:00Z"}\n')
    text = (path / "state.json").read_text("utf-8")
    (path / "state.json").write_text(text.replace('"remaining": "10"', '"remaining": "11"'))
    result = run(tmp_path, "verify", "broken")
    assert result.code == 4
    assert result.out == (
        "broken: state directory has mode 755; expected 700 at most\n"
        f"broken: leftover temp file {temp}\n"
        "broken: state.json has mode 644; expected 600 at most\n"
        "broken: state: activity.jsonl is corrupt at line 1\n"
        "broken: budget.remaining is 11 but starting + earned - spent - children funded is 10\n"
    )
    assert result.err == "singularity: state: broken failed verification: 5 problem(s)\n"


def _schema_break(path: Path) -> None:
    document = json.loads((path / "state.json").read_text("utf-8"))
    del document["cycle"]
    (path / "state.json").write_text(json.dumps(document))


def _newer_schema(path: Path) -> None:
    text = (path / "state.json").read_text("utf-8")
    (path / "state.json").write_text(text.replace('"being-v1"', '"being-v2"'))


def _spent_too_much(path: Path) -> None:
    document = json.loads((path / "state.json").read_text("utf-8"))
    document["budget"]["api_spent"] = "0.25"
    (path / "state.json").write_text(json.dumps(document))
    os.chmod(path / "state.json", 0o600)


def _torn_journal(path: Path) -> None:
    with open(path / "activity.jsonl", "ab") as journal:
        journal.write(b'{"type":"started","at":"2026-01-01T00:00:00Z"}\n{"type":"cyc')


def _missing_state(path: Path) -> None:
    os.unlink(path / "state.json")


def _debits_without_spend(path: Path) -> None:
    with open(path / "activity.jsonl", "ab") as journal:
        journal.write(
            b'{"type":"cost_debited","at":"2026-01-01T00:00:00Z","cycle":1,"amount":"0.5"}\n'
        )


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_schema_break, "state.json does not match being-v1: cycle"),
        (_newer_schema, "state: unsupported state schema being-v2"),
        (
            _spent_too_much,
            "budget.remaining is 10 but starting + earned - spent - children funded is 9.75",
        ),
        (_torn_journal, "activity.jsonl ends with a torn line of 12 bytes (the next boot cuts it)"),
        (_missing_state, "state.json is missing"),
        (_debits_without_spend, "journaled debits total 0.5 but the budget shows 0 spent"),
    ],
)
def test_verify_one_problem(
    in_process: Callable[..., Result], damage: Callable[[Path], None], problem: str
) -> None:
    path = Path("being")
    make_being(path)
    damage(path)
    result = in_process("verify", "being")
    assert result.code == 4
    assert result.out.startswith(f"being: {problem}")
    assert result.out.count("\n") == 1
    assert result.err == "singularity: state: being failed verification: 1 problem(s)\n"


HAND_WRITTEN = """{
  "schema_version": "being-v1",
  "identity": {
    "agent_id": "a1", "name": "Ada", "ticker": "ADA", "agent_type": "general",
    "specialty": "math", "role": "being", "environment": "local", "host": "localhost",
    "workload_id": "w", "workload_public_key": "ZEROS", "executable_digest": "ZEROS",
    "code_digest": "ZEROS", "policy_digest": "ZEROS", "policy_sequence": 0
  },
  "mind": {
    "system_prompt": "You are Ada.", "rules": ["r"], "learnings": [],
    "memories": [
      {"id": "6f1c1a9e-3d6b-4c61-9a8e-2f5b8e0c1d2a", "kind": "note", "text": "hello",
       "created_at": "2026-01-01T00:00:00Z"}
    ],
    "children": [], "current_model": "any"
  },
  "status": "stopped",
  "cycle": 3,
  "budget": {"starting": "10", "remaining": 9.5, "api_spent": "0.5", "instance_spent": "0",
             "total_tokens": 12, "earned": "0"},
  "conversation": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
  "recent_actions": [],
  "created_resources": {"chat_ids": [], "message_ids": []},
  "started_at": "2026-01-01T00:00:00Z",
  "updated_at": "2026-01-01T00:00:00.123Z"
}
""".replace("ZEROS", ZEROS)


def test_verify_accepts_a_hand_written_minimal_being(tmp_path: Path) -> None:
    path = tmp_path / "hand"
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    (path / "state.json").write_text(HAND_WRITTEN)
    os.chmod(path / "state.json", 0o600)
    result = run(tmp_path, "verify", "hand")
    assert result == Result(0, "hand: ok\n", "")
    assert sorted(os.listdir(path)) == ["state.json"]  # no lock, no journal created


def test_verify_a_missing_directory(in_process: Callable[..., Result]) -> None:
    result = in_process("verify", "absent")
    assert result.code == 4
    assert result.out == "absent: cannot open absent: No such file or directory (os error 2)\n"


# --- import ---------------------------------------------------------------------------

ACCEPTED_REPORT = """{
  "accepted": true,
  "source_kind": "notes-export",
  "source_id": "export-2026-01",
  "imported": 4,
  "attributed": 0,
  "unchanged": 0,
  "conflicting": 0,
  "rejected": 0,
  "issues": []
}
"""

REFUSED_REPORT = """{
  "accepted": false,
  "source_kind": "notes-export",
  "source_id": "export-2026-01",
  "imported": 0,
  "attributed": 0,
  "unchanged": 1,
  "conflicting": 1,
  "rejected": 0,
  "issues": [
    {
      "category": "memory",
      "item_id": "m-2",
      "reason": "source item was imported before with different content"
    }
  ]
}
"""


def test_import_prints_the_report(tmp_path: Path) -> None:
    make_being(tmp_path / "being")
    valid = str(FIXTURES / "valid.json")
    result = run(tmp_path, "import", "--file", valid, "--state-dir", "being")
    assert result == Result(0, ACCEPTED_REPORT, "")
    journal = (tmp_path / "being" / "activity.jsonl").read_text("utf-8").splitlines()
    assert json.loads(journal[-1])["type"] == "mind_imported"


def test_import_reads_the_state_dir_variable(
    monkeypatch: pytest.MonkeyPatch, in_process: Callable[..., Result]
) -> None:
    make_being(Path("being"))
    monkeypatch.setenv("SINGULARITY_STATE_DIR", "being")
    result = in_process("import", "--file", str(FIXTURES / "only-knowledge.json"))
    assert result.code == 0
    assert json.loads(result.out)["imported"] == 1


def test_refused_import_exits_4_and_changes_nothing(tmp_path: Path) -> None:
    make_being(tmp_path / "being")
    import_offline(str(FIXTURES / "valid.json"), str(tmp_path / "being"))
    before = files(tmp_path / "being")
    result = run(
        tmp_path, "import", "--file", str(FIXTURES / "changed.json"), "--state-dir", "being"
    )
    assert result == Result(
        4,
        REFUSED_REPORT,
        "singularity: state: import refused: 1 conflicting and 0 rejected item(s); "
        "no state was changed\n",
    )
    assert files(tmp_path / "being") == before


def test_import_while_the_being_is_running(tmp_path: Path) -> None:
    make_being(tmp_path / "being")
    before = files(tmp_path / "being")
    lock = os.open(tmp_path / "being" / "lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = run(
            tmp_path, "import", "--file", str(FIXTURES / "valid.json"), "--state-dir", "being"
        )
    finally:
        os.close(lock)
    assert result == Result(
        4,
        "",
        "singularity: state: the being is running; import through its local state service "
        "or stop it first\n",
    )
    assert files(tmp_path / "being") == before


def test_import_without_a_being(tmp_path: Path) -> None:
    result = run(
        tmp_path, "import", "--file", str(FIXTURES / "valid.json"), "--state-dir", "nobody"
    )
    assert result == Result(
        4,
        "",
        "singularity: state: no being state exists at nobody/state.json; "
        "create the being before importing\n",
    )


@pytest.mark.parametrize(
    ("fixture", "error"),
    [
        (
            "wrong-schema.json",
            "state: unsupported import schema singularity-mind-import-v2; "
            "expected singularity-mind-import-v1",
        ),
        ("missing.json", "state: cannot inspect import file {file}: No such file or directory"),
        ("unknown-field.json", "state: invalid Singularity import: "),
    ],
)
def test_import_validation_failures_exit_4(
    in_process: Callable[..., Result], fixture: str, error: str
) -> None:
    make_being(Path("being"))
    before = files(Path("being"))
    file = str(FIXTURES / fixture)
    result = in_process("import", "--file", file, "--state-dir", "being")
    assert result.code == 4
    assert result.out == ""
    assert result.err.startswith("singularity: " + error.format(file=file))
    assert result.err.count("\n") == 1
    assert files(Path("being")) == before


def test_import_requires_a_file(in_process: Callable[..., Result]) -> None:
    result = in_process("import")
    assert result.code == 2
    assert result.out == ""
