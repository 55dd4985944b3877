"""A being living in a PostgreSQL state store (`--state-url`, `--agent-id`), from the CLI.

Against the session's real PostgreSQL server and the scripted gateway: `once` lives a
cycle on a being whose state is rows (its state directory keeps only its local files),
`show` and `verify` read it without its lease, `verify` checks the stored activity
journal and ledger, two beings share one store by their agent ids, a second runtime is
refused by the lease, and a bad URL is refused saying what is wrong.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

from singularity.store.opening import StorePlace, open_store_at, peek_events_at, peek_state_at
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import Result, cli_args
from tests.support.polling import wait_for
from tests.support.stores import store_url

ADD_RULE = "singularity_self_add_rule"


def new_agent() -> str:
    return f"agent-{uuid.uuid4().hex[:12]}"


def in_store(root: Path, server: ScriptedServer, agent: str, *extra: str) -> list[str]:
    """Flags of `once` for the being `agent` in the store, its local files in `root/being`."""
    return [*cli_args(root, server, *extra), "--state-url", store_url(), "--agent-id", agent]


def test_a_being_lives_a_cycle_in_postgres_and_is_shown_and_verified(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_agent()
    script = [Turn.tool_call(ADD_RULE, {"rule": "keep going"}), Turn.text("done")]
    with ScriptedServer(script) as server:
        first = cli("once", *in_store(tmp_path, server, agent, "--input-price", "1"))
    assert first.code == 0, first.err
    assert json.loads(first.out)["cycle"] == 1
    local = tmp_path / "being"
    assert not (local / "state.json").exists() and not (local / "activity.jsonl").exists()
    place = StorePlace.parse(store_url())
    state = peek_state_at(place, agent)
    assert state is not None
    assert state.identity.agent_id == agent and state.cycle == 1 and state.status == "stopped"
    assert state.mind.rules == ["keep going"]
    kinds = [event["type"] for event in peek_events_at(place, agent)]
    assert kinds.count("cost_debited") == 2 and kinds[-1] == "stopped"

    with ScriptedServer([Turn.text("again")]) as server:
        again = cli("once", "--resume", *in_store(tmp_path, server, agent))
    assert again.code == 0, again.err
    assert json.loads(again.out)["cycle"] == 2

    at = ["--state-url", store_url(), "--agent-id", agent, "--state-dir", str(local)]
    shown = cli("show", "--json", *at)
    assert shown.code == 0, shown.err
    summary = json.loads(shown.out)
    assert summary["identity"]["agent_id"] == agent and summary["cycle"] == 2
    verified = cli("verify", *at)
    assert verified.code == 0, verified.out + verified.err
    assert verified.out.strip().endswith(": ok")
    assert f"being {agent} in " in verified.out


def test_verify_checks_the_stored_journal_against_the_ledger(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_agent()
    with ScriptedServer([Turn.text("done")]) as server:
        assert cli("once", *in_store(tmp_path, server, agent, "--input-price", "1")).code == 0
    at = ["--state-url", store_url(), "--agent-id", agent]
    assert cli("verify", *at).code == 0
    with psycopg.connect(store_url(), autocommit=True) as db:
        seq = db.execute(
            "SELECT max(seq) FROM singularity.activity WHERE agent_id = %s", (agent,)
        ).fetchone()
        assert seq is not None
        line = {
            "type": "cost_debited",
            "at": "2026-01-01T00:00:00Z",
            "cycle": 1,
            "operation_id": "never-reserved",
            "amount": "1",
        }
        db.execute(
            "INSERT INTO singularity.activity (agent_id, seq, type, at, cycle, operation_id, "
            "line) VALUES (%s, %s, 'cost_debited', %s, 1, 'never-reserved', %s)",
            (agent, seq[0] + 1, line["at"], json.dumps(line)),
        )
    found = cli("verify", *at)
    assert found.code == 4
    assert "settles operation never-reserved, which was never reserved" in found.out
    assert "journaled debits total" in found.out
    assert "the stored activity journal event" in found.out


def test_two_beings_in_one_store_are_chosen_by_agent_id(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    first, second = new_agent(), new_agent()
    for agent, rule in ((first, "one"), (second, "two")):
        root = tmp_path / agent
        root.mkdir()
        with ScriptedServer([Turn.tool_call(ADD_RULE, {"rule": rule}), Turn.text("ok")]) as server:
            done = cli("once", *in_store(root, server, agent, "--agent-name", f"B-{rule}"))
        assert done.code == 0, done.err
    for agent, name in ((first, "B-one"), (second, "B-two")):
        shown = cli("show", "--json", "--state-url", store_url(), "--agent-id", agent)
        assert shown.code == 0, shown.err
        summary = json.loads(shown.out)
        assert (summary["identity"]["agent_id"], summary["identity"]["name"]) == (agent, name)
        assert cli("verify", "--state-url", store_url(), "--agent-id", agent).code == 0
    missing = cli("show", "--state-url", store_url(), "--agent-id", new_agent())
    assert missing.code == 4 and "no being agent-" in missing.err


def test_a_second_runtime_is_refused_by_the_lease(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_agent()
    with ScriptedServer([Turn.text("done")]) as server:
        assert cli("once", *in_store(tmp_path, server, agent)).code == 0
    holder = open_store_at(StorePlace.parse(store_url()), agent)  # a runtime living it
    (tmp_path / "elsewhere").mkdir()
    try:
        with ScriptedServer([Turn.text("never served")]) as server:
            refused = cli("once", "--resume", *in_store(tmp_path / "elsewhere", server, agent))
            served = len(server.completions)
        assert refused.code == 4
        assert f"state: another runtime owns being {agent} in " in refused.err
        assert served == 0
        # Read beside the living one: the journal's open ends are warnings, not problems.
        assert cli("verify", "--state-url", store_url(), "--agent-id", agent).code == 0
    finally:
        holder.close()


def test_a_living_runtime_keeps_its_being_from_a_second_one(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_agent()
    place = StorePlace.parse(store_url())
    env = clean_environment()
    with ScriptedServer([Turn.text("resting")]) as server:
        args = [*in_store(tmp_path, server, agent), "--cycle-interval-secs", "3600"]
        with (tmp_path / "stderr.txt").open("wb") as log:
            living = subprocess.Popen(
                [str(SINGULARITY), "run", *args],
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        try:

            def first_cycle_finished() -> bool:
                assert living.poll() is None, (tmp_path / "stderr.txt").read_text()
                return "cycle_finished" in [e["type"] for e in peek_events_at(place, agent)]

            wait_for(first_cycle_finished, "the first cycle to finish", timeout=120)
            (tmp_path / "second").mkdir()
            second = cli("once", "--resume", *in_store(tmp_path / "second", server, agent))
            assert second.code == 4
            assert f"state: another runtime owns being {agent} in " in second.err
            assert cli("verify", "--state-url", store_url(), "--agent-id", agent).code == 0
        finally:
            living.send_signal(signal.SIGTERM)
            code = living.wait(timeout=120)
    assert code == 0, (tmp_path / "stderr.txt").read_text()
    state = peek_state_at(place, agent)
    assert state is not None and state.status == "stopped" and state.cycle == 1
    with ScriptedServer([Turn.text("mine now")]) as server:
        taken = cli("once", "--resume", *in_store(tmp_path / "second", server, agent))
    assert taken.code == 0, taken.err  # the lease was released at the clean stop


def test_a_local_state_directory_serves_one_being(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_agent()
    with ScriptedServer([Turn.text("done")]) as server:
        assert cli("once", *cli_args(tmp_path, server)).code == 0  # a directory being
        mixed = cli("once", *in_store(tmp_path, server, agent))
    assert mixed.code == 4
    assert "holds a being of its own (state.json)" in mixed.err
    assert peek_state_at(StorePlace.parse(store_url()), agent) is None


def test_a_bad_state_url_is_refused_saying_what_and_where(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("never served")]) as server:
        flag = cli("once", *cli_args(tmp_path, server), "--state-url", "mysql://db/beings")
        env = cli("once", *cli_args(tmp_path, server), SINGULARITY_STATE_URL="file://far/x")
        served = len(server.completions)
    assert flag.code == 2
    assert flag.err.strip() == (
        "singularity: configuration: --state-url mysql://db/beings: unknown scheme 'mysql'; "
        "expected postgresql://…, file:///path or a directory path"
    )
    assert env.code == 2
    assert "SINGULARITY_STATE_URL file://far/x: a file URL names a local path" in env.err
    assert served == 0
    assert not (tmp_path / "being").exists()
    unreachable = cli(
        "show", "--state-url", "postgresql://nobody:secret@127.0.0.1:1/none", "--agent-id", "a"
    )
    assert unreachable.code == 4
    assert "cannot connect to the state store postgresql://nobody@127.0.0.1:1/none" in (
        unreachable.err
    )
    assert "secret" not in unreachable.err


def test_a_directory_state_url_is_the_state_directory(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("done")]) as server:
        args = [a for a in cli_args(tmp_path, server) if a not in ("--state-dir",)]
        args.remove(str(tmp_path / "being"))
        done = cli("once", *args, "--state-url", (tmp_path / "elsewhere").as_uri())
    assert done.code == 0, done.err
    assert (tmp_path / "elsewhere" / "state.json").exists()
    assert cli("verify", "--state-url", f"file://{tmp_path / 'elsewhere'}").code == 0
    named_twice = cli(
        "show", "--state-dir", str(tmp_path / "a"), "--state-url", str(tmp_path / "b")
    )
    assert named_twice.code == 2 and "name two directories; give one" in named_twice.err


def test_resuming_a_being_the_store_lacks_writes_nothing(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    ghost = new_agent()
    with ScriptedServer([Turn.text("done")]) as server:
        refused = cli("once", "--resume", *in_store(tmp_path, server, ghost))
    assert refused.code == 4
    assert f"resume requested but no state exists at being {ghost} in postgresql://" in (
        refused.err
    )
    with psycopg.connect(store_url(), autocommit=True) as db:
        # A store no earlier test of this worker migrated stays unmigrated: no table holds it.
        migrated = {
            name
            for (name,) in db.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = 'singularity'"
            )
        }
        for table in ("beings", "leases", "activity", "places"):
            if table not in migrated:
                continue
            found = db.execute(
                f"SELECT count(*) FROM singularity.{table} WHERE agent_id = %s", (ghost,)
            ).fetchone()
            assert found is not None and found[0] == 0, table


def test_doctor_checks_the_boot_matrix_against_the_store(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_agent()
    with ScriptedServer([Turn.text("done")]) as server:
        fresh = cli("doctor", *in_store(tmp_path, server, agent))
        assert fresh.code == 0, fresh.out + fresh.err
        assert cli("once", *in_store(tmp_path, server, agent)).code == 0
        born = cli("doctor", *in_store(tmp_path, server, agent))
        resumed = cli("doctor", "--resume", *in_store(tmp_path, server, agent))
    assert born.code == 4
    assert json.loads(born.out)["problems"] == [
        f"state: state: state already exists at being {agent} in {store_url()}; "
        "use --resume or a new directory"
    ]
    assert resumed.code == 0, resumed.out + resumed.err
