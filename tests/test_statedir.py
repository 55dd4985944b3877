"""The state directory (spec §5.1, §5.2; decisions 11, 12, 14).

Contract: the directory is created 0700 (also set on every open) with files 0600
whatever the umask; a directory that is a symlink or belongs to another user is
refused; one runtime at a time holds `<dir>/lock` (opened without following links), a
second gets `state: another runtime owns <dir>` (exit 4); boot removes only leftover
temp files of our own naming that are regular files we own.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain import events
from singularity.errors import StateError, StateLockedError
from singularity.runtime.being import open_being
from singularity.storage.statedir import StateDir
from singularity.store.directory import peek_state

IS_ROOT = os.geteuid() == 0
NOBODY = 65534
needs_root = pytest.mark.skipif(not IS_ROOT, reason="chown to another uid needs root")


def _clock() -> datetime:
    return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _tree(root: Path) -> dict[str, tuple[int, int, bytes | str | None]]:
    """Every entry under root: (mode, uid, content or link target)."""
    found: dict[str, tuple[int, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = os.lstat(path)
            content: bytes | str | None = None
            if stat.S_ISLNK(info.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = path.read_bytes()
            found[str(path.relative_to(root))] = (info.st_mode, info.st_uid, content)
    return found


def _make_being(state_dir: Path) -> None:
    settings = resolve({"state_dir": str(state_dir)}, environ={})
    being = open_being(settings, clock=_clock)
    being.journal(events.Started(being.now()))
    being.state.status = "running"
    being.save()
    being.close()


# --- permissions -----------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_created_modes_do_not_depend_on_the_umask(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "deep" / "er" / "state"
    os.umask(umask)
    _make_being(state_dir)
    assert _mode(state_dir) == 0o700
    for name in ("state.json", "activity.jsonl", "lock"):
        assert _mode(state_dir / name) == 0o600, name
    assert stat.S_ISREG(os.lstat(state_dir / "state.json").st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_an_existing_open_directory_is_tightened_to_0700(tmp_path: Path, umask: int) -> None:
    os.umask(umask)
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o777)
    os.chmod(state_dir, 0o777)
    with StateDir.open(str(state_dir)):
        assert _mode(state_dir) == 0o700


def test_a_new_directory_does_not_open_a_window_with_wider_modes(tmp_path: Path) -> None:
    os.umask(0o000)
    seen: list[int] = []
    original_mkdir = os.mkdir

    def spy(path: str, mode: int = 0o777, *args: object, **kwargs: object) -> None:
        seen.append(mode)
        original_mkdir(path, mode)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "mkdir", spy)
        StateDir.open(str(tmp_path / "a" / "state")).close()
    assert seen and all(mode == 0o700 for mode in seen)


# --- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/"])
def test_a_state_directory_that_is_a_symlink_is_refused(tmp_path: Path, suffix: str) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(StateError) as caught:
        StateDir.open(str(link) + suffix)
    assert str(caught.value) == f"state: state directory must not be a symlink: {link}"
    assert caught.value.exit_code == 4
    assert list(real.iterdir()) == []  # no lock file planted in the target


def test_a_state_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"x")
    with pytest.raises(StateError) as caught:
        StateDir.open(str(path))
    assert str(caught.value) == f"state: state directory is not a directory: {path}"
    assert path.read_bytes() == b"x"


@needs_root
def test_a_state_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "theirs"
    state_dir.mkdir(mode=0o755)
    os.chown(state_dir, NOBODY, NOBODY)
    with pytest.raises(StateError) as caught:
        StateDir.open(str(state_dir))
    assert str(caught.value) == f"state: state directory {state_dir} is owned by another user"
    assert list(state_dir.iterdir()) == []
    assert _mode(state_dir) == 0o755  # not chmodded either


@needs_root
def test_a_being_in_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _make_being(state_dir)
    os.chown(state_dir, NOBODY, NOBODY)
    before = _tree(state_dir)
    settings = resolve({"state_dir": str(state_dir), "resume": True}, environ={})
    with pytest.raises(StateError, match="owned by another user"):
        open_being(settings)
    assert _tree(state_dir) == before


@needs_root
def test_a_dropped_privilege_process_cannot_read_the_state() -> None:
    base = Path(tempfile.mkdtemp(prefix="singularity-nobody-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)  # reachable by nobody, unlike pytest's 0700 tmp_path
        control = base / "control"
        control.write_bytes(b"readable")
        os.chmod(control, 0o644)
        state_dir = base / "state"
        _make_being(state_dir)
        targets = [control, state_dir, state_dir / "state.json", state_dir / "activity.jsonl"]
        script = textwrap.dedent(
            f"""
            import os
            os.setgid({NOBODY}); os.setuid({NOBODY})
            for path in {[str(path) for path in targets]!r}:
                try:
                    if os.path.isdir(path):
                        os.listdir(path)
                    else:
                        open(path, "rb").close()
                    print("readable", path)
                except PermissionError:
                    print("denied", path)
            """
        )
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
        )
        assert result.stdout.splitlines() == [
            f"readable {control}",
            f"denied {state_dir}",
            f"denied {state_dir / 'state.json'}",
            f"denied {state_dir / 'activity.jsonl'}",
        ]
    finally:
        shutil.rmtree(base)


# --- the lock --------------------------------------------------------------------------


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "state")
    first = StateDir.open(path)
    try:
        with pytest.raises(StateLockedError) as caught:
            StateDir.open(path)
        assert str(caught.value) == f"state: another runtime owns {path}"
        assert caught.value.exit_code == 4
    finally:
        first.close()
    StateDir.open(path).close()  # released on close


HOLDER = textwrap.dedent(
    """
    import sys
    from singularity.config import resolve
    from singularity.domain import events
    from singularity.runtime.being import open_being

    settings = resolve({"state_dir": sys.argv[1], "resume": sys.argv[2] == "resume"}, environ={})
    being = open_being(settings)
    being.journal(events.Started(being.now()))
    being.save()
    print("ready", flush=True)
    sys.stdin.readline()
    being.close()
    """
)

CONTENDER = textwrap.dedent(
    """
    import sys
    from singularity.config import resolve
    from singularity.errors import SingularityError
    from singularity.runtime.being import open_being

    settings = resolve({"state_dir": sys.argv[1], "resume": True}, environ={})
    try:
        open_being(settings)
    except SingularityError as error:
        print(f"singularity: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    print("opened")
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A real second process that has booted a being and holds its lock."""
    state_dir = tmp_path / "state"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir), "new"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    try:
        assert process.stdout.readline() == "ready\n", process.stderr
        yield state_dir, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=120)


def test_a_second_runtime_is_refused_while_a_real_process_holds_the_lock(
    holder: tuple[Path, subprocess.Popen[str]],
) -> None:
    state_dir, process = holder
    before = _tree(state_dir)
    settings = resolve({"state_dir": str(state_dir), "resume": True}, environ={})
    with pytest.raises(StateLockedError) as caught:
        open_being(settings)
    assert str(caught.value) == f"state: another runtime owns {state_dir}"
    with pytest.raises(StateLockedError):
        StateDir.open(str(state_dir))
    assert _tree(state_dir) == before

    assert process.stdin is not None
    process.stdin.write("\n")
    process.stdin.flush()
    assert process.wait(timeout=120) == 0
    being = open_being(settings)  # the lock went with the process
    being.close()


def test_a_real_second_process_exits_4_while_we_hold_the_lock(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _make_being(state_dir)
    before = _tree(state_dir)
    settings = resolve({"state_dir": str(state_dir), "resume": True}, environ={})
    being = open_being(settings)
    try:
        result = subprocess.run(
            [sys.executable, "-c", CONTENDER, str(state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    finally:
        being.close()
    assert result.returncode == 4
    assert result.stderr == f"singularity: state: another runtime owns {state_dir}\n"
    assert _tree(state_dir) == before


def test_the_lock_dies_with_a_killed_process(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir), "new"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    process.kill()
    process.wait(timeout=120)
    settings = resolve({"state_dir": str(state_dir), "resume": True}, environ={})
    open_being(settings).close()


def test_a_symlink_planted_at_the_lock_path_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    target = tmp_path / "precious"
    target.write_bytes(b"do not touch")
    os.chmod(target, 0o644)
    target_before = os.stat(target)
    (state_dir / "lock").symlink_to(target)
    with pytest.raises(StateError) as caught:
        StateDir.open(str(state_dir))
    assert str(caught.value) == (
        f"state: cannot open lock file in {state_dir}: "
        "Too many levels of symbolic links (os error 40)"
    )
    assert target.read_bytes() == b"do not touch"
    after = os.stat(target)
    assert (after.st_mode, after.st_size, after.st_mtime_ns) == (
        target_before.st_mode,
        target_before.st_size,
        target_before.st_mtime_ns,
    )


def test_a_dangling_symlink_at_the_lock_path_does_not_create_its_target(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    target = tmp_path / "created-through-link"
    (state_dir / "lock").symlink_to(target)
    with pytest.raises(StateError):
        StateDir.open(str(state_dir))
    assert not os.path.lexists(target)


# --- temp cleanup ----------------------------------------------------------------------


def _temp_name() -> str:
    return f".state-{uuid.uuid4()}.tmp"


def test_cleanup_removes_only_our_own_regular_temp_files(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside")

    ours = sorted([_temp_name(), _temp_name()])
    for name in ours:
        (state_dir / name).write_bytes(b"half a state")
    kept = {
        "link": _temp_name(),
        "dir": _temp_name(),
        "upper": f".state-{str(uuid.uuid4()).upper()}.tmp",
        "short": ".state-1234.tmp",
        "no-dot": f"state-{uuid.uuid4()}.tmp",
        "suffix": f"{_temp_name()}.bak",
        "other-prefix": f".state.json.{uuid.uuid4()}.tmp",
        "plain": "notes.txt",
    }
    (state_dir / kept["link"]).symlink_to(outside)
    (state_dir / kept["dir"]).mkdir()
    (state_dir / kept["dir"] / "inner").write_bytes(b"inner")
    for key in ("upper", "short", "no-dot", "suffix", "other-prefix", "plain"):
        (state_dir / kept[key]).write_bytes(key.encode())
    if IS_ROOT:
        kept["foreign"] = _temp_name()
        (state_dir / kept["foreign"]).write_bytes(b"someone else's")
        os.chown(state_dir / kept["foreign"], NOBODY, NOBODY)

    with StateDir.open(str(state_dir)) as opened:
        before = _tree(state_dir)
        removed = opened.remove_stale_temps()

    assert sorted(removed) == ours
    after = _tree(state_dir)
    assert set(before) - set(after) == set(ours)
    for name in kept.values():
        assert after[name] == before[name], name
    assert after[kept["dir"] + "/inner"] == before[kept["dir"] + "/inner"]
    assert outside.read_bytes() == b"outside"


def test_cleanup_with_nothing_to_do(tmp_path: Path) -> None:
    with StateDir.open(str(tmp_path / "state")) as opened:
        assert opened.remove_stale_temps() == []


def test_boot_removes_leftover_temps(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _make_being(state_dir)
    leftover = state_dir / _temp_name()
    leftover.write_bytes(b"{")
    settings = resolve({"state_dir": str(state_dir), "resume": True}, environ={})
    being = open_being(settings)
    being.close()
    assert not leftover.exists()


# --- load and save ---------------------------------------------------------------------


def test_save_then_load(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _make_being(state_dir)
    with StateDir.open(str(state_dir)) as opened:
        loaded = opened.load()
        assert loaded is not None
        assert (state_dir / "state.json").read_bytes() == loaded.to_json()
        loaded.cycle = 41
        opened.save(loaded)
        assert [p.name for p in state_dir.iterdir() if p.name.endswith(".tmp")] == []
        again = opened.load()
    assert again is not None and again.cycle == 41
    peeked = peek_state(str(state_dir))
    assert peeked is not None and peeked.to_json() == again.to_json()


def test_load_without_state_is_none(tmp_path: Path) -> None:
    with StateDir.open(str(tmp_path / "state")) as opened:
        assert opened.load() is None
        assert not opened.has_state()
    assert peek_state(str(tmp_path / "nowhere")) is None


def test_state_json_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _make_being(state_dir)
    real = tmp_path / "elsewhere.json"
    os.replace(state_dir / "state.json", real)
    (state_dir / "state.json").symlink_to(real)
    with StateDir.open(str(state_dir)) as opened, pytest.raises(StateError) as caught:
        opened.load()
    assert str(caught.value) == "state: state.json must be a regular file, not a symlink"


def test_save_replaces_a_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _make_being(state_dir)
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim")
    with StateDir.open(str(state_dir)) as opened:
        state = opened.load()
        assert state is not None
        (state_dir / "state.json").unlink()
        (state_dir / "state.json").symlink_to(victim)
        opened.save(state)
    assert victim.read_bytes() == b"victim"
    assert stat.S_ISREG(os.lstat(state_dir / "state.json").st_mode)
