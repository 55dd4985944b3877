"""Where a worker keeps the beings of a fleet: a directory store, or a PostgreSQL store
beside the worker's folder of local files (`--local-dir`).

In PostgreSQL the agent id selects a being, so each being of the fleet has its own there:
a root its key, a child its child id (a child keeps its parent's in a directory store,
spec §14). A child not born yet opens only where its grant is. A worker given a store
it cannot use stops with exit 2 before it connects to anything.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from singularity.errors import ConfigurationError, StateLockedError
from singularity.fleet.messages import BeingSpec
from singularity.fleet.places import FleetStore, being_settings, child_key
from singularity.storage.funding import GRANT
from tests.support.fleet import SINGULARITY
from tests.support.stores import store_url

CHILD_ID = "0b0e3c2a-7d1f-4c55-9a7e-2f6a8d9c1b34"
URL = "postgresql://fleet:secret@127.0.0.1:5/beings"


def test_a_postgresql_store_needs_a_local_dir_and_a_directory_store_takes_none() -> None:
    with pytest.raises(ConfigurationError, match="needs --local-dir") as refused:
        FleetStore.parse(URL)
    assert "secret" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="only a PostgreSQL state store takes it"):
        FleetStore.parse("/srv/beings", "/var/lib/local")
    assert FleetStore.parse(URL, "local") == FleetStore(str(Path("local").absolute()), URL)
    assert FleetStore.parse("file:///srv/beings") == FleetStore("/srv/beings")


def test_each_being_has_its_own_agent_id_in_postgresql(tmp_path: Path) -> None:
    root, child = "ada", child_key("ada", CHILD_ID)
    in_postgres = FleetStore(str(tmp_path), store_url())
    in_directory = FleetStore(str(tmp_path))
    unique = f"ada-{uuid.uuid4().hex[:6]}"
    settings = being_settings({}, None, in_postgres, BeingSpec(unique))
    assert (settings.agent_id, settings.state_url) == (unique, store_url())
    assert settings.state_dir == str(tmp_path / unique / "state")
    assert not settings.resume  # the store holds no such being yet
    assert in_postgres.agent_id(child) == CHILD_ID
    assert in_directory.agent_id(child) == root
    # The same local folders in both stores.
    assert in_postgres.state_dir(child) == in_directory.state_dir(child)
    assert in_postgres.workspace(child) == str(tmp_path / root / "workspace")
    settings = being_settings({}, None, in_directory, BeingSpec(root))
    assert (settings.agent_id, settings.state_url) == (root, None)


def test_an_unborn_child_opens_only_where_its_grant_is(tmp_path: Path) -> None:
    store = FleetStore(str(tmp_path), store_url())
    parent = f"ada-{uuid.uuid4().hex[:6]}"
    key = child_key(parent, str(uuid.uuid4()))
    with pytest.raises(StateLockedError, match="its grant is not on this machine"):
        store.check_grant(key)
    state_dir = Path(store.state_dir(key))
    state_dir.mkdir(parents=True)
    (state_dir / GRANT).write_text("{}")
    store.check_grant(key)  # the worker that funded it opens it
    store.check_grant(parent)  # a root being needs no grant
    FleetStore(str(tmp_path)).check_grant(child_key(parent, str(uuid.uuid4())))  # nor a directory's


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--state-url", URL], "needs --local-dir"),
        (["--state-url", "/srv/beings", "--local-dir", "/tmp/x"], "only a PostgreSQL"),
    ],
)
def test_a_worker_refuses_a_store_it_cannot_use(flags: list[str], said: str) -> None:
    done = subprocess.run(
        [SINGULARITY, "worker", "--temporal", "127.0.0.1:9", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "secret" not in done.stderr
