"""The confinement primitive: path grammar, symlink escapes, races, and the one-primitive rule.

Escape and race tests run against both resolvers: `openat2` and the component walk.
Every escape test plants canaries outside the workspace and checks that no read returns
them and that nothing outside changes.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from singularity.errors import ConfigurationError
from singularity.jsoncodec import compact
from singularity.storage import fsio
from singularity.tools import confinement
from singularity.tools.base import Outcome
from singularity.tools.confinement import (
    InvalidPath,
    Workspace,
    WorkspaceEscape,
    check_disjoint,
    parse_path,
)
from singularity.tools.files import read_file, write_file

SRC_TOOLS = Path(__file__).resolve().parent.parent / "src" / "singularity" / "tools"
BOUNDARY = ("failed", "workspace_boundary", '{"message":"path leaves the workspace"}')
NOT_REGULAR_DEST = ("failed", "file_write", '{"message":"destination is not a regular file"}')
INVALID_PATH = (
    "failed",
    "invalid_path",
    '{"message":"path must contain only relative normal components"}',
)
CANARY = b"CANARY outside the workspace\n"

MakeWorkspace = Callable[[Path], Workspace]


def wire(outcome: Outcome) -> tuple[str, str | None, str]:
    """Status, error code and content exactly as they reach the model."""
    return outcome.status.value, outcome.error_code, compact(outcome.content, sort_keys=True)


def read(ws: Workspace, path: str) -> tuple[str, str | None, str]:
    return wire(read_file(ws, {"path": path}))


def write(ws: Workspace, path: str, content: str = "new") -> tuple[str, str | None, str]:
    return wire(write_file(ws, {"path": path, "content": content}))


def ok_read(path: str, content: str) -> tuple[str, None, str]:
    return "success", None, compact({"content": content, "path": path}, sort_keys=True)


def ok_write(path: str, size: int) -> tuple[str, None, str]:
    return "success", None, compact({"bytes": size, "path": path}, sort_keys=True)


# --- the grammar ---------------------------------------------------------------------

REJECTED = [
    "",
    "/",
    "/etc/passwd",
    "//server/share",
    "..",
    "../x",
    "a/..",
    "a/../b",
    ".",
    "./",
    "./a",
    "a\\b",
    "\\\\?\\x",
    "C:\\x",
    "C:",
    "a:b",
    "a\x00b",
    "a\x01b",
    "a\tb",
    "a\nb",
    "a\x1b[31mb",
    "a\x7fb",
    "a\x85b",
    "a\u202eb",
    "a\u202ab",
    "a\u2066b",
    "a\u2069b",
    "a\u200eb",
    "a\u200fb",
    "a\u061cb",
    "x" * 256,
    "\u00e9" * 128,
    "ok/" + "y" * 256 + "/z",
    "a\ud800b",
]

ACCEPTED = [
    ("a", ("a",)),
    ("a/b", ("a", "b")),
    ("a//b", ("a", "b")),
    ("a///b//", ("a", "b")),
    ("a/./b", ("a", "b")),
    ("a/", ("a",)),
    ("a/.", ("a",)),
    (".hidden", (".hidden",)),
    ("...", ("...",)),
    ("a/..b/c..", ("a", "..b", "c..")),
    ("~", ("~",)),
    ("x" * 255, ("x" * 255,)),
    ("\u00e9" * 127 + "x", ("\u00e9" * 127 + "x",)),
    ("d\u00e9j\u00e0 vu/\u65e5\u672c.txt", ("d\u00e9j\u00e0 vu", "\u65e5\u672c.txt")),
]


@pytest.mark.parametrize("text", REJECTED, ids=repr)
def test_grammar_rejects(text: str) -> None:
    with pytest.raises(InvalidPath) as caught:
        parse_path(text)
    assert str(caught.value) == "path must contain only relative normal components"


@pytest.mark.parametrize(("text", "parts"), ACCEPTED, ids=repr)
def test_grammar_accepts_and_normalizes(text: str, parts: tuple[str, ...]) -> None:
    assert parse_path(text) == parts


# Tool-level table: (path argument, expected wire outcome) for read; write is the same.
PATH_INVALID_ARGS = ("failed", "invalid_arguments", '{"message":"path is invalid"}')
TOOL_REJECTIONS: list[tuple[object, tuple[str, str | None, str]]] = [
    ("", PATH_INVALID_ARGS),
    ("   ", PATH_INVALID_ARGS),
    ("\u3000\t", PATH_INVALID_ARGS),
    (None, PATH_INVALID_ARGS),
    (7, PATH_INVALID_ARGS),
    ("a\x00b", PATH_INVALID_ARGS),
    ("a\tb", PATH_INVALID_ARGS),
    ("a\x1b[2Jb", PATH_INVALID_ARGS),
    ("a\ud800", PATH_INVALID_ARGS),
    ("x/" * 2048 + "y", PATH_INVALID_ARGS),
    ("/etc/passwd", INVALID_PATH),
    ("//server/share", INVALID_PATH),
    ("..", INVALID_PATH),
    ("a/../b", INVALID_PATH),
    ("./a", INVALID_PATH),
    ("a\\b", INVALID_PATH),
    ("C:\\x", INVALID_PATH),
    ("\\\\?\\x", INVALID_PATH),
    ("a:b", INVALID_PATH),
    ("a\u202eb", INVALID_PATH),
    ("a\u2066b", INVALID_PATH),
    ("x" * 256, INVALID_PATH),
    ("../ws-evil/x", INVALID_PATH),
]


class _Spy:
    """Counts every call of every function of the `os` module and of the openat2 syscall."""

    def __init__(self) -> None:
        self.active = False
        self.calls: list[str] = []

    def wrap(self, name: str, function: Callable[..., object]) -> Callable[..., object]:
        def spied(*args: object, **kwargs: object) -> object:
            if self.active:
                self.calls.append(name)
            return function(*args, **kwargs)

        return spied


@pytest.fixture
def os_spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Spy]:
    spy = _Spy()
    for name in dir(os):
        value = getattr(os, name)
        if callable(value) and not isinstance(value, type) and not name.startswith("_"):
            monkeypatch.setattr(os, name, spy.wrap(f"os.{name}", value))
    if confinement._syscall is not None:
        monkeypatch.setattr(confinement, "_syscall", spy.wrap("syscall", confinement._syscall))
    monkeypatch.setattr("builtins.open", spy.wrap("open", open))
    yield spy


@pytest.mark.parametrize(("path", "expected"), TOOL_REJECTIONS, ids=repr)
def test_tool_rejections_make_no_system_call(
    tmp_path: Path, path: object, expected: tuple[str, str | None, str], os_spy: _Spy
) -> None:
    ws = Workspace(tmp_path)
    os_spy.active = True
    read_outcome = wire(read_file(ws, {"path": path}))
    write_outcome = wire(write_file(ws, {"path": path, "content": "x"}))
    os_spy.active = False
    ws.close()
    assert read_outcome == expected
    assert write_outcome == expected
    assert os_spy.calls == []
    assert list(tmp_path.iterdir()) == []


def test_spy_sees_real_calls(tmp_path: Path, os_spy: _Spy) -> None:
    """The spy is not blind: a valid path does reach the system."""
    ws = Workspace(tmp_path)
    os_spy.active = True
    read_file(ws, {"path": "missing"})
    os_spy.active = False
    ws.close()
    assert os_spy.calls


_AUDIT_SCRIPT = """
import json, sys
from singularity.tools.confinement import Workspace
from singularity.tools.files import read_file, write_file
ws = Workspace(sys.argv[1])
paths = json.loads(sys.argv[2])
events = []
sys.addaudithook(lambda event, args: events.append(event))
for path in paths:
    read_file(ws, {"path": path})
    write_file(ws, {"path": path, "content": "x"})
seen = list(events)
read_file(ws, {"path": "missing"})
print(json.dumps({"rejected": seen, "control": events[len(seen):]}))
"""


def test_rejections_raise_no_audit_event_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """Audit hooks see every `open`, `os.*` mutation and ctypes call; rejections raise none."""
    paths = [path for path, _ in TOOL_REJECTIONS if isinstance(path, str) and "\ud800" not in path]
    result = subprocess.run(
        [sys.executable, "-c", _AUDIT_SCRIPT, str(tmp_path), json.dumps(paths)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(result.stdout)
    assert report["rejected"] == []
    assert report["control"], "the audit hook must see a real resolution"
    assert list(tmp_path.iterdir()) == []


# --- symlink escapes, against both resolvers -------------------------------------------


@pytest.fixture(params=["openat2", "walk"])
def make_workspace(request: pytest.FixtureRequest) -> Iterator[MakeWorkspace]:
    created: list[Workspace] = []

    def make(root: Path) -> Workspace:
        try:
            ws = Workspace(root, use_openat2=request.param == "openat2")
        except ConfigurationError:
            pytest.skip("openat2 is not available on this kernel")
        assert ws.uses_openat2 is (request.param == "openat2")
        created.append(ws)
        return ws

    yield make
    for ws in created:
        ws.close()


class Layout:
    """`base/ws` (the workspace) next to `base/outside` and `base/ws-evil`, both canaries."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ws = base / "ws"
        self.outside = base / "outside"
        self.evil = base / "ws-evil"
        for directory in (self.ws, self.outside / "dir", self.evil):
            directory.mkdir(parents=True)
        self.canary = self.outside / "canary.txt"
        self.canary.write_bytes(CANARY)
        (self.outside / "dir" / "canary.txt").write_bytes(CANARY)
        (self.outside / "f").write_bytes(CANARY)
        (self.evil / "x").write_bytes(CANARY)
        (self.ws / "real.txt").write_text("inside\n")
        (self.ws / "sub").mkdir()
        (self.ws / "sub" / "inner.txt").write_text("inner\n")

    def link(self, name: str, target: str | Path) -> None:
        os.symlink(target, self.ws / name)

    def outside_snapshot(self) -> dict[str, tuple[str, bytes | str]]:
        """Every entry under `base` except the workspace, with content or link target."""
        entries: dict[str, tuple[str, bytes | str]] = {}
        for directory, dirnames, filenames in os.walk(self.base):
            if Path(directory) == self.base:
                dirnames.remove("ws")
            for name in dirnames + filenames:
                path = Path(directory, name)
                key = str(path.relative_to(self.base))
                if path.is_symlink():
                    entries[key] = ("link", os.readlink(path))
                elif path.is_file():
                    entries[key] = ("file", path.read_bytes())
                else:
                    entries[key] = ("dir", b"")
        return entries


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    planted = Layout(tmp_path)
    before = planted.outside_snapshot()
    yield planted
    assert planted.outside_snapshot() == before, "something outside the workspace changed"


def test_final_component_symlink_out(layout: Layout, make_workspace: MakeWorkspace) -> None:
    layout.link("rel", "../outside/canary.txt")
    layout.link("abs", layout.canary)
    layout.link("deep", "sub/../../outside/canary.txt")
    (layout.ws / "sub" / "up").symlink_to("../../outside/canary.txt")
    ws = make_workspace(layout.ws)
    for name in ("rel", "abs", "deep", "sub/up"):
        assert read(ws, name) == BOUNDARY
        assert write(ws, name) == NOT_REGULAR_DEST
        assert os.path.islink(layout.ws / name)


def test_intermediate_directory_symlink_out(layout: Layout, make_workspace: MakeWorkspace) -> None:
    """The case `O_NOFOLLOW` alone misses: a symlinked directory in the middle."""
    layout.link("mid", "../outside")
    layout.link("midabs", layout.outside)
    (layout.ws / "sub" / "mid").symlink_to("../../outside/dir")
    ws = make_workspace(layout.ws)
    for path in ("mid/canary.txt", "midabs/canary.txt", "sub/mid/canary.txt", "mid/dir/canary.txt"):
        assert read(ws, path) == BOUNDARY
        assert write(ws, path) == BOUNDARY
    assert write(ws, "mid/newdir/deeper/x.txt") == BOUNDARY
    assert write(ws, "mid/new.txt") == BOUNDARY
    assert not (layout.outside / "newdir").exists()


def test_dangling_symlink_as_write_target(layout: Layout, make_workspace: MakeWorkspace) -> None:
    layout.link("dangle_out", "../outside/created.txt")
    layout.link("dangle_abs", layout.outside / "created_abs.txt")
    layout.link("dangle_in", "not-yet.txt")
    ws = make_workspace(layout.ws)
    for name in ("dangle_out", "dangle_abs", "dangle_in"):
        assert write(ws, name) == NOT_REGULAR_DEST
        assert os.path.islink(layout.ws / name)
    assert read(ws, "dangle_out") == BOUNDARY
    assert read(ws, "dangle_abs") == BOUNDARY
    assert read(ws, "dangle_in") == (
        "failed",
        "file_read",
        '{"message":"No such file or directory (os error 2)"}',
    )
    assert not (layout.ws / "not-yet.txt").exists()


def test_dangling_symlinked_parent_creates_nothing(
    layout: Layout, make_workspace: MakeWorkspace
) -> None:
    layout.link("gone", "../outside/newdir")
    layout.link("gone_in", "missing-dir")
    ws = make_workspace(layout.ws)
    assert write(ws, "gone/x.txt") == BOUNDARY
    assert write(ws, "gone_in/x.txt") == (
        "failed",
        "file_write",
        '{"message":"No such file or directory (os error 2)"}',
    )
    assert not (layout.ws / "missing-dir").exists()


def test_sibling_sharing_the_prefix(layout: Layout, make_workspace: MakeWorkspace) -> None:
    """`ws` and `ws-evil`: the string-prefix bug of CVE-2025-53110 and CVE-2025-54794."""
    layout.link("evil", "../ws-evil")
    layout.link("evil_abs", layout.evil)
    layout.link("evil_file", "../ws-evil/x")
    ws = make_workspace(layout.ws)
    assert read(ws, "../ws-evil/x") == INVALID_PATH
    assert write(ws, "../ws-evil/x") == INVALID_PATH
    for path in ("evil/x", "evil_abs/x", "evil_file"):
        assert read(ws, path) == BOUNDARY
    assert write(ws, "evil/x") == BOUNDARY
    assert write(ws, "evil/y") == BOUNDARY
    assert not (layout.evil / "y").exists()


def test_symlinks_that_stay_inside_are_followed(
    layout: Layout, make_workspace: MakeWorkspace
) -> None:
    layout.link("alias", "real.txt")
    layout.link("chain", "alias")
    layout.link("subdir", "sub")
    layout.link("roundabout", "sub/../sub/inner.txt")
    (layout.ws / "sub" / "up").symlink_to("../real.txt")
    ws = make_workspace(layout.ws)
    for path in ("alias", "chain", "sub/up"):
        assert read(ws, path) == ok_read(path, "inside\n")
    assert read(ws, "subdir/inner.txt") == ok_read("subdir/inner.txt", "inner\n")
    assert read(ws, "roundabout") == ok_read("roundabout", "inner\n")
    assert write(ws, "subdir/made.txt", "hi") == ok_write("subdir/made.txt", 2)
    assert (layout.ws / "sub" / "made.txt").read_text() == "hi"
    assert write(ws, "subdir/new/deep.txt", "x") == ok_write("subdir/new/deep.txt", 1)
    assert (layout.ws / "sub" / "new" / "deep.txt").read_text() == "x"
    assert write(ws, "alias", "x") == NOT_REGULAR_DEST  # never through a final symlink
    assert (layout.ws / "real.txt").read_text() == "inside\n"


def test_dotdot_in_targets_counts_levels_exactly(
    layout: Layout, make_workspace: MakeWorkspace
) -> None:
    deep = layout.ws / "sub" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "up").symlink_to("../../../../real.txt")
    (deep / "out").symlink_to("../../../../../outside/canary.txt")
    (deep / "hop").symlink_to("../../b/./c/../c/up")
    layout.link("via", "sub/a/b/c")
    ws = make_workspace(layout.ws)
    assert read(ws, "sub/a/b/c/up") == ok_read("sub/a/b/c/up", "inside\n")
    assert read(ws, "sub/a/b/c/hop") == ok_read("sub/a/b/c/hop", "inside\n")
    assert read(ws, "sub/a/b/c/out") == BOUNDARY
    # Through `via` the lexical depth is 1 + 3; `..` climbs the directories really passed.
    assert read(ws, "via/up") == ok_read("via/up", "inside\n")
    assert read(ws, "via/out") == BOUNDARY


@pytest.mark.timeout(300)
def test_deep_paths_hold_few_descriptors(tmp_path: Path, make_workspace: MakeWorkspace) -> None:
    """The walk holds only the current directory open, so depth cannot exhaust descriptors."""
    ws = make_workspace(tmp_path)
    path = "/".join(["d"] * 300) + "/f.txt"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 16, hard))
    try:
        assert write(ws, path, "deep") == ok_write(path, 4)
        (tmp_path.joinpath(*["d"] * 300) / "up").symlink_to("../" * 300 + "top")
        (tmp_path / "top").write_text("top")
        up = path.replace("f.txt", "up")
        assert read(ws, up) == ok_read(up, "top")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        shutil.rmtree(tmp_path / "d")  # spare pytest's recursive cleanup a deep tree


def test_links_leaving_and_coming_back_are_refused(
    layout: Layout, make_workspace: MakeWorkspace
) -> None:
    """Like RESOLVE_BENEATH: a target that passes outside (or is absolute) leaves, even if
    it would come back in by name."""
    layout.link("back", "../ws/real.txt")
    layout.link("absin", layout.ws / "real.txt")
    ws = make_workspace(layout.ws)
    assert read(ws, "back") == BOUNDARY
    assert read(ws, "absin") == BOUNDARY


def test_magic_links_and_devices_via_symlink(layout: Layout, make_workspace: MakeWorkspace) -> None:
    layout.link("proc", "/proc/self/root/etc/hostname")
    layout.link("fd", "/proc/self/fd/0")
    layout.link("null", "/dev/null")
    layout.link("zero", "/dev/zero")
    ws = make_workspace(layout.ws)
    for name in ("proc", "fd", "null", "zero"):
        assert read(ws, name) == BOUNDARY


def test_symlink_loop_is_an_os_error(layout: Layout, make_workspace: MakeWorkspace) -> None:
    layout.link("a", "b")
    layout.link("b", "a")
    layout.link("d", "d/x")
    ws = make_workspace(layout.ws)
    loop = ("failed", "file_read", '{"message":"Too many levels of symbolic links (os error 40)"}')
    assert read(ws, "a") == loop
    assert read(ws, "d") == loop


def test_root_reached_through_a_symlink(layout: Layout, make_workspace: MakeWorkspace) -> None:
    os.symlink(layout.ws, layout.base / "ws" / "sub" / "wslink")
    layout.link("out", "../outside/canary.txt")
    ws = make_workspace(layout.base / "ws" / "sub" / "wslink")
    assert ws.root == str(layout.ws.resolve())
    assert read(ws, "real.txt") == ok_read("real.txt", "inside\n")
    assert write(ws, "sub/w.txt", "w") == ok_write("sub/w.txt", 1)
    assert read(ws, "out") == BOUNDARY


def test_component_that_is_a_file(layout: Layout, make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(layout.ws)
    not_dir = ("failed", "file_read", '{"message":"Not a directory (os error 20)"}')
    assert read(ws, "real.txt/x") == not_dir
    assert write(ws, "real.txt/x") == (
        "failed",
        "file_write",
        '{"message":"Not a directory (os error 20)"}',
    )


def test_state_directory_is_unreachable(tmp_path: Path, make_workspace: MakeWorkspace) -> None:
    workspace_dir = tmp_path / "ws"
    state_dir = tmp_path / "state"
    workspace_dir.mkdir()
    state_dir.mkdir()
    (state_dir / "state.json").write_text("{}")
    check_disjoint(workspace_dir, state_dir)
    (workspace_dir / "state").symlink_to("../state")
    os.link(state_dir / "state.json", workspace_dir / "hard.json")
    ws = make_workspace(workspace_dir)
    assert write(ws, "state/state.json", "pwned") == BOUNDARY
    assert write(ws, "state/new.json", "pwned") == BOUNDARY
    assert read(ws, "state/state.json") == BOUNDARY
    assert read(ws, "hard.json") == (
        "failed",
        "file_read",
        '{"message":"path is not a bounded regular file"}',
    )
    # Replacing a hard-linked name swaps the workspace's entry; the state file is untouched.
    assert write(ws, "hard.json", "mine") == ok_write("hard.json", 4)
    assert (state_dir / "state.json").read_text() == "{}"
    assert sorted(os.listdir(state_dir)) == ["state.json"]


def test_direct_api_returns_descriptors(layout: Layout, make_workspace: MakeWorkspace) -> None:
    layout.link("mid", "../outside")
    ws = make_workspace(layout.ws)
    fd = ws.open_file(("sub", "inner.txt"))
    try:
        assert os.read(fd, 100) == b"inner\n"
    finally:
        os.close(fd)
    fd = ws.open_dir(())
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(layout.ws))
    finally:
        os.close(fd)
    with pytest.raises(WorkspaceEscape):
        ws.open_dir(("mid",))
    with pytest.raises(WorkspaceEscape):
        ws.open_file(("mid", "canary.txt"))
    with pytest.raises(FileNotFoundError):
        ws.open_dir(("nope",))
    assert not (layout.ws / "nope").exists()


# --- the race ----------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchanger() -> Callable[[bytes, bytes], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    function = libc.renameat2
    function.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    function.restype = ctypes.c_int

    def exchange(first: bytes, second: bytes) -> int:
        return int(function(_AT_FDCWD, first, _AT_FDCWD, second, _RENAME_EXCHANGE))

    return exchange


RACE_OPERATIONS = 4_000  # per resolver (the slow tier runs 100,000)


def _race(layout: Layout, ws: Workspace, operations: int) -> dict[str, int]:
    """Swap `ws/sw` between a real directory and a symlink to outside while reading and
    writing `sw/f` through it; the canary must never be returned or changed."""
    (layout.ws / "sw").mkdir()
    (layout.ws / "sw" / "f").write_text("INSIDE start")
    (layout.ws / "alt").symlink_to("../outside")
    exchange = _exchanger()
    first, second = bytes(layout.ws / "sw"), bytes(layout.ws / "alt")
    stop = threading.Event()
    swaps = [0]

    def attacker() -> None:
        while not stop.is_set():
            if exchange(first, second) == 0:
                swaps[0] += 1

    seen: dict[str, int] = {}
    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        for index in range(operations):
            if index % 2:
                status, code, content = read(ws, "sw/f")
                assert "CANARY" not in content
                if status == "success":
                    assert json.loads(content)["content"].startswith("INSIDE")
            else:
                status, code, content = write(ws, "sw/f", f"INSIDE {index}")
            key = f"{'read' if index % 2 else 'write'}:{code or status}"
            seen[key] = seen.get(key, 0) + 1
    finally:
        stop.set()
        thread.join()
    assert (layout.outside / "f").read_bytes() == CANARY
    assert layout.canary.read_bytes() == CANARY
    assert sorted(os.listdir(layout.outside)) == ["canary.txt", "dir", "f"]
    assert swaps[0] > 0
    seen["swaps"] = swaps[0]
    return seen


def _race_checks(seen: dict[str, int]) -> None:
    allowed = {
        "read:success",
        "read:workspace_boundary",
        "write:success",
        "write:workspace_boundary",
        "swaps",
    }
    assert set(seen) <= allowed, seen
    # Both states of the swapped component were really met.
    assert seen.get("read:success", 0) + seen.get("write:success", 0) > 0, seen
    assert seen.get("read:workspace_boundary", 0) + seen.get("write:workspace_boundary", 0) > 0


@pytest.fixture
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race is about confinement, not durability: skip the slow fsyncs."""
    monkeypatch.setattr(fsio, "sync", lambda fd, name, *, data_only=False: None)


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("no_fsync")
def test_symlink_swap_race(layout: Layout, make_workspace: MakeWorkspace) -> None:
    _race_checks(_race(layout, make_workspace(layout.ws), RACE_OPERATIONS))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("no_fsync")
def test_symlink_swap_race_long(layout: Layout, make_workspace: MakeWorkspace) -> None:
    _race_checks(_race(layout, make_workspace(layout.ws), 100_000))


@pytest.mark.timeout(300)
def test_final_component_swap_race(layout: Layout, make_workspace: MakeWorkspace) -> None:
    """Reads while `ws/fin` flips between a regular file and a symlink to the canary."""
    (layout.ws / "fin").write_text("INSIDE")
    (layout.ws / "fin_alt").symlink_to("../outside/canary.txt")
    ws = make_workspace(layout.ws)
    exchange = _exchanger()
    first, second = bytes(layout.ws / "fin"), bytes(layout.ws / "fin_alt")
    stop = threading.Event()
    swaps = [0]

    def attacker() -> None:
        while not stop.is_set():
            if exchange(first, second) == 0:
                swaps[0] += 1

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    outcomes: dict[str, int] = {}
    try:
        for _ in range(RACE_OPERATIONS // 2):
            status, code, content = read(ws, "fin")
            assert "CANARY" not in content
            outcomes[code or status] = outcomes.get(code or status, 0) + 1
    finally:
        stop.set()
        thread.join()
    assert set(outcomes) <= {"success", "workspace_boundary"}, outcomes
    assert swaps[0] > 0 and outcomes.get("success", 0) > 0, outcomes


# The worst adversary of the walk, made deterministic: the entry is swapped right after
# each failed look at it by name, so every second look meets the other state.


@pytest.fixture
def swap_after_each_failed_look(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, str], list[int]]:
    def arm(name: str, other: str) -> list[int]:
        exchange = _exchanger()
        first, second = bytes(layout.ws / name), bytes(layout.ws / other)
        swaps = [0]

        def swapped(call: Callable[..., object]) -> Callable[..., object]:
            def look(path: object, *args: object, **kwargs: object) -> object:
                try:
                    return call(path, *args, **kwargs)
                except OSError:
                    if path == name and kwargs.get("dir_fd") is not None:
                        assert exchange(first, second) == 0
                        swaps[0] += 1
                    raise

            return look

        monkeypatch.setattr(os, "open", swapped(os.open))
        monkeypatch.setattr(os, "readlink", swapped(os.readlink))
        return swaps

    return arm


@pytest.mark.parametrize("operation", ["read", "write"])
def test_a_directory_swapped_at_the_worst_moment_is_taken_as_it_was(
    layout: Layout,
    swap_after_each_failed_look: Callable[[str, str], list[int]],
    no_fsync: None,
    operation: str,
) -> None:
    """`sw` is a symlink out when first looked at, a directory inside right after."""
    (layout.ws / "sw").mkdir()
    (layout.ws / "sw" / "f").write_text("INSIDE start")
    (layout.ws / "alt").symlink_to("../outside")
    _exchanger()(bytes(layout.ws / "sw"), bytes(layout.ws / "alt"))  # sw: the symlink
    with Workspace(layout.ws, use_openat2=False) as ws:
        swaps = swap_after_each_failed_look("sw", "alt")
        if operation == "read":
            assert read(ws, "sw/f") == ok_read("sw/f", "INSIDE start")
        else:
            assert write(ws, "sw/f", "INSIDE again") == ok_write("sw/f", 12)
            assert (layout.ws / "sw" / "f").read_text() == "INSIDE again"
    assert swaps == [1]
    assert (layout.outside / "f").read_bytes() == CANARY


def test_a_final_file_swapped_at_the_worst_moment_is_read_as_it_was(
    layout: Layout, swap_after_each_failed_look: Callable[[str, str], list[int]]
) -> None:
    (layout.ws / "fin").write_text("INSIDE")
    (layout.ws / "fin_alt").symlink_to("../outside/canary.txt")
    _exchanger()(bytes(layout.ws / "fin"), bytes(layout.ws / "fin_alt"))  # fin: the symlink
    with Workspace(layout.ws, use_openat2=False) as ws:
        swaps = swap_after_each_failed_look("fin", "fin_alt")
        assert read(ws, "fin") == ok_read("fin", "INSIDE")
    assert swaps == [1]


def test_without_proc_a_final_file_swapped_at_that_instant_asks_to_try_again(
    layout: Layout,
    swap_after_each_failed_look: Callable[[str, str], list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confinement, "PROC_FDS", str(layout.base / "no-proc"))
    (layout.ws / "fin").write_text("INSIDE")
    (layout.ws / "fin_alt").symlink_to("../outside/canary.txt")
    _exchanger()(bytes(layout.ws / "fin"), bytes(layout.ws / "fin_alt"))
    with Workspace(layout.ws, use_openat2=False) as ws:
        swap_after_each_failed_look("fin", "fin_alt")
        assert read(ws, "fin") == (
            "failed",
            "file_read",
            '{"message":"Resource temporarily unavailable (os error 11)"}',
        )
        # Once the entry holds still, the same read succeeds.
        monkeypatch.undo()
        assert read(ws, "fin") == ok_read("fin", "INSIDE")


def test_a_directory_moved_out_while_a_link_in_it_is_followed_is_not_left_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`a/b/l` names `../secret`; `b` moves out of the workspace just as `l` is read.

    The `..` of `l` then leads to where `b` went, not to `a`: the walk notices that the
    parent is not the directory it came through and asks to try again.
    """
    (tmp_path / "ws" / "a" / "b").mkdir(parents=True)
    (tmp_path / "ws" / "a" / "secret").write_text("INSIDE")
    (tmp_path / "ws" / "a" / "b" / "l").symlink_to("../secret")
    (tmp_path / "away").mkdir()
    (tmp_path / "away" / "secret").write_bytes(CANARY)
    real_readlink = os.readlink
    moves = [0]

    def readlink_while_moving(path: str, *, dir_fd: int | None = None) -> str:
        if not moves[0]:  # `l` is read through its own descriptor: the first readlink
            os.rename(tmp_path / "ws" / "a" / "b", tmp_path / "away" / "b")
            moves[0] += 1
        return real_readlink(path, dir_fd=dir_fd)

    with Workspace(tmp_path / "ws", use_openat2=False) as ws:
        monkeypatch.setattr(os, "readlink", readlink_while_moving)
        assert read(ws, "a/b/l") == (
            "failed",
            "file_read",
            '{"message":"Resource temporarily unavailable (os error 11)"}',
        )
    assert moves == [1]


# --- construction, disjointness, stale temps ---------------------------------------------


def test_workspace_must_exist_and_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as missing:
        Workspace(tmp_path / "missing")
    assert str(missing.value) == "configuration: workspace: No such file or directory (os error 2)"
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError) as not_dir:
        Workspace(tmp_path / "file")
    assert str(not_dir.value) == "configuration: workspace must be a directory"


def test_forced_walk_and_auto_detection(tmp_path: Path) -> None:
    with Workspace(tmp_path, use_openat2=False) as walk:
        assert walk.uses_openat2 is False
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        available = confinement.openat2_available(fd)
    finally:
        os.close(fd)
    with Workspace(tmp_path) as auto:
        assert auto.uses_openat2 is available


def test_long_paths_fall_back_to_the_walk(tmp_path: Path, make_workspace: MakeWorkspace) -> None:
    """openat2 refuses paths of PATH_MAX bytes; the walk takes them."""
    ws = make_workspace(tmp_path)
    path = "/".join(["d" * 200] * 20) + "/f.txt"
    assert len(path.encode()) > 4000
    assert write(ws, path, "deep") == ok_write(path, 4)
    assert read(ws, path) == ok_read(path, "deep")


@pytest.mark.parametrize(
    ("workspace", "state", "clash"),
    [
        ("ws", "ws", True),
        ("ws", "ws/state", True),
        ("ws/inner", "ws", True),
        ("ws", "ws-state", False),
        ("ws", "state", False),
        ("ws", "link-into-ws", True),
    ],
)
def test_check_disjoint(tmp_path: Path, workspace: str, state: str, clash: bool) -> None:
    (tmp_path / "ws" / "inner").mkdir(parents=True)
    (tmp_path / "link-into-ws").symlink_to(tmp_path / "ws" / "inner")
    if not clash:
        check_disjoint(tmp_path / workspace, tmp_path / state)
        return
    with pytest.raises(ConfigurationError) as caught:
        check_disjoint(tmp_path / workspace, tmp_path / state)
    ws_real = os.path.realpath(tmp_path / workspace)
    state_real = os.path.realpath(tmp_path / state)
    assert str(caught.value) == (
        "configuration: workspace and state directory must not contain each other: "
        f"{ws_real} / {state_real}"
    )


def test_remove_stale_temps_removes_only_our_own(tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    outside = tmp_path / "outside"
    (ws_dir / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    target = outside / "target.txt"
    target.write_bytes(CANARY)
    ours = [
        ws_dir / ".singularity-0b4f6c1e-8f4a-4d5e-9b1a-2c3d4e5f6a7b.tmp",
        ws_dir / "a" / "b" / ".singularity-11111111-2222-4333-8444-555555555555.tmp",
    ]
    for path in ours:
        path.write_text("partial")
    kept = {
        ws_dir / ".singularity-not-a-uuid.tmp": "file",
        ws_dir / "x.tmp": "file",
        ws_dir / ".singularity-0b4f6c1e-8f4a-4d5e-9b1a-2c3d4e5f6a7b.tmp.bak": "file",
        ws_dir / ".state.json.0b4f6c1e-8f4a-4d5e-9b1a-2c3d4e5f6a7b.tmp": "file",
    }
    for path in kept:
        path.write_text("keep")
    link = ws_dir / "a" / ".singularity-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee.tmp"
    link.symlink_to(target)
    directory = ws_dir / ".singularity-99999999-8888-4777-8666-555555555555.tmp"
    directory.mkdir()
    (outside / ".singularity-12345678-1234-4234-8234-123456789abc.tmp").write_text("out")
    (ws_dir / "escape").symlink_to("../outside")
    foreign = ws_dir / ".singularity-cccccccc-dddd-4eee-8fff-000000000000.tmp"
    foreign.write_text("theirs")
    is_root = os.geteuid() == 0
    if is_root:
        os.chown(foreign, 65534, 65534)
    with Workspace(ws_dir) as ws:
        removed = ws.remove_stale_temps()
    assert removed == (2 if is_root else 3)
    assert not any(path.exists() for path in ours)
    assert all(path.exists() for path in kept)
    assert link.is_symlink() and target.read_bytes() == CANARY
    assert directory.is_dir()
    assert (outside / ".singularity-12345678-1234-4234-8234-123456789abc.tmp").exists()
    assert foreign.exists() is is_root


# --- one primitive (static) --------------------------------------------------------------

_FORBIDDEN_CALLS = {"open", "os.open", "os.openat", "os.fdopen", "io.open", "os.mkdir"}
_FORBIDDEN_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def forbidden_io(source: str) -> list[str]:
    """Direct file opens, pathlib I/O and shutil use in one module's source."""
    hits: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if name in _FORBIDDEN_CALLS or method in _FORBIDDEN_METHODS:
                hits.append(f"{node.lineno}: {name}()")
        elif isinstance(node, ast.Attribute) and _dotted(node).startswith("shutil."):
            hits.append(f"{node.lineno}: {_dotted(node)}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = {alias.name for alias in node.names}
            if (
                module == "shutil"
                or "shutil" in names
                or (module in ("os", "io") and "open" in names)
            ):
                hits.append(f"{node.lineno}: import {module or ''} {sorted(names)}")
    return hits


def test_only_the_confinement_module_opens_files() -> None:
    modules = sorted(SRC_TOOLS.rglob("*.py"))
    assert SRC_TOOLS / "files.py" in modules
    offenders = {
        str(path.relative_to(SRC_TOOLS)): hits
        for path in modules
        if path.name != "confinement.py" and (hits := forbidden_io(path.read_text()))
    }
    assert offenders == {}


def test_the_static_check_catches_offenders() -> None:
    source = (
        "import shutil\nfrom os import open\nfrom pathlib import Path\n"
        "open('x')\nos.open('x', 0)\nPath('x').write_text('y')\nshutil.copy('a', 'b')\n"
    )
    assert len(forbidden_io(source)) == 6
