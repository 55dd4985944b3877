"""A being started with no flags at all (decisions 1 and 24).

Its state goes to `./.singularity` and its workspace is `./workspace`, created 0700 when
the being is born: the two never contain each other, so the README's first command works
in any directory. Only the gateway's address is given, as the environment would.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

from singularity.runtime.inspect.verify import verify_state_dir
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import Result

WRITE = "singularity_file_write"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_being_with_no_flags_is_born_with_its_own_workspace(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [Turn.tool_call(WRITE, {"path": "hello.txt", "content": "hi"}), Turn.text("done")]
    with ScriptedServer(script) as server:
        result = cli("once", BRAMA_BASE_URL=server.url)
    assert result.code == 0, result.err
    assert json.loads(result.out)["actions"] == [WRITE]
    assert sorted(path.name for path in tmp_path.iterdir()) == [".singularity", "workspace"]
    assert _mode(tmp_path / "workspace") == 0o700
    assert (tmp_path / "workspace" / "hello.txt").read_text() == "hi"
    assert verify_state_dir(str(tmp_path / ".singularity")) == []


def test_a_resumed_being_needs_its_workspace(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with ScriptedServer() as server:
        assert cli("once", BRAMA_BASE_URL=server.url).code == 0
        assert cli("once", "--resume", BRAMA_BASE_URL=server.url).code == 0
        (tmp_path / "workspace").rmdir()
        refused = cli("once", "--resume", BRAMA_BASE_URL=server.url)
    assert refused.code == 2
    assert refused.err.splitlines()[-1] == (
        "singularity: configuration: workspace: No such file or directory (os error 2)"
    )
    assert not (tmp_path / "workspace").exists()


def test_an_existing_workspace_is_used_as_it_is(tmp_path: Path, cli: Callable[..., Result]) -> None:
    (tmp_path / "workspace").mkdir(mode=0o755)
    (tmp_path / "workspace").chmod(0o755)
    with ScriptedServer() as server:
        assert cli("once", BRAMA_BASE_URL=server.url).code == 0
    assert _mode(tmp_path / "workspace") == 0o755


def test_a_refused_boot_creates_no_workspace(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with ScriptedServer() as server:
        refused = cli("once", "--temperature", "9", BRAMA_BASE_URL=server.url)
    assert refused.code == 2
    assert not (tmp_path / "workspace").exists() and not (tmp_path / ".singularity").exists()
