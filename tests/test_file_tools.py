"""The two file tools: contract bytes, non-regular files, size bounds, write semantics."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from singularity.errors import ConfigurationError
from singularity.jsoncodec import compact
from singularity.storage import fsio
from singularity.tools.base import FunctionToolset, Outcome
from singularity.tools.confinement import Workspace
from singularity.tools.files import (
    MAX_FILE_BYTES,
    NotBoundedRegularFile,
    file_tools,
    read_bounded,
    read_file,
    write_file,
)

MIB2 = 2 * 1024 * 1024
NOT_BOUNDED = ("failed", "file_read", '{"message":"path is not a bounded regular file"}')
NOT_REGULAR_DEST = ("failed", "file_write", '{"message":"destination is not a regular file"}')
CONTENT_INVALID = ("failed", "invalid_arguments", '{"message":"content is invalid or too large"}')
PATH_INVALID = ("failed", "invalid_arguments", '{"message":"path is invalid"}')
INVALID_PATH = (
    "failed",
    "invalid_path",
    '{"message":"path must contain only relative normal components"}',
)
CANARY = b"CANARY outside the workspace\n"


def wire(outcome: Outcome) -> tuple[str, str | None, str]:
    """Status, error code and content exactly as they reach the model."""
    return outcome.status.value, outcome.error_code, compact(outcome.content, sort_keys=True)


@pytest.fixture(params=["openat2", "walk"])
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workspace]:
    root = tmp_path / "ws"
    root.mkdir()
    try:
        workspace = Workspace(root, use_openat2=request.param == "openat2")
    except ConfigurationError:
        pytest.skip("openat2 is not available on this kernel")
    yield workspace
    workspace.close()


def root(ws: Workspace) -> Path:
    return Path(ws.root)


def read(ws: Workspace, path: Any) -> tuple[str, str | None, str]:
    return wire(read_file(ws, {"path": path}))


def write(ws: Workspace, path: Any, content: Any) -> tuple[str, str | None, str]:
    return wire(write_file(ws, {"path": path, "content": content}))


def temps(directory: Path) -> list[str]:
    return [str(p) for p in directory.rglob(".singularity-*.tmp")]


# --- the contract ------------------------------------------------------------------------


def test_definitions_byte_for_byte(ws: Workspace) -> None:
    toolset = FunctionToolset(file_tools(ws))
    assert [compact(d.wire()) for d in toolset.definitions()] == [
        '{"type":"function","function":{"name":"singularity_file_read",'
        '"description":"Read one UTF-8 file inside the configured workspace",'
        '"parameters":{"type":"object","properties":{"path":{"type":"string"}},'
        '"required":["path"],"additionalProperties":false}}}',
        '{"type":"function","function":{"name":"singularity_file_write",'
        '"description":"Atomically create or replace one UTF-8 file inside the configured '
        'workspace","parameters":{"type":"object","properties":{"path":{"type":"string"},'
        '"content":{"type":"string"}},"required":["path","content"],'
        '"additionalProperties":false}}}',
    ]


def test_round_trip_through_the_toolset(ws: Workspace) -> None:
    toolset = FunctionToolset(file_tools(ws))

    async def scenario() -> tuple[Outcome, Outcome]:
        written = await toolset.call(
            "singularity_file_write", {"path": " notes/día 1.md ", "content": " ünï\ncode\n"}
        )
        read_back = await toolset.call("singularity_file_read", {"path": "notes//día 1.md/"})
        return written, read_back

    written, read_back = asyncio.run(scenario())
    assert wire(written) == ("success", None, '{"bytes":12,"path":"notes/día 1.md"}')
    assert written.chat_id is None and written.message_id is None
    assert wire(read_back) == (
        "success",
        None,
        '{"content":" ünï\\ncode\\n","path":"notes//día 1.md/"}',
    )
    assert (root(ws) / "notes" / "día 1.md").read_bytes() == " ünï\ncode\n".encode()


def test_read_errors_byte_for_byte(ws: Workspace) -> None:
    (root(ws) / "bad.txt").write_bytes(b"ok\xff")
    (root(ws) / "surrogate.txt").write_bytes(b"\xed\xa0\x80")
    assert read(ws, "missing.txt") == (
        "failed",
        "file_read",
        '{"message":"No such file or directory (os error 2)"}',
    )
    assert read(ws, "bad.txt") == (
        "failed",
        "file_read",
        '{"message":"\'utf-8\' codec can\'t decode byte 0xff in position 2: invalid start byte"}',
    )
    assert read(ws, "surrogate.txt")[:2] == ("failed", "file_read")
    assert read(ws, "..") == INVALID_PATH
    assert read(ws, "") == PATH_INVALID


def test_empty_file_and_bom_are_kept(ws: Workspace) -> None:
    (root(ws) / "empty").write_bytes(b"")
    (root(ws) / "bom").write_bytes(b"\xef\xbb\xbfx")
    assert read(ws, "empty") == ("success", None, '{"content":"","path":"empty"}')
    assert read(ws, "bom") == ("success", None, '{"content":"\ufeffx","path":"bom"}')


# --- non-regular files -------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_fifo_is_refused_without_blocking(ws: Workspace) -> None:
    os.mkfifo(root(ws) / "fifo")
    assert read(ws, "fifo") == NOT_BOUNDED
    assert write(ws, "fifo", "x") == NOT_REGULAR_DEST
    assert stat.S_ISFIFO(os.lstat(root(ws) / "fifo").st_mode)


@pytest.mark.timeout(120)
def test_socket_is_refused(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root(ws))  # a relative bind keeps under the 108-byte socket path limit
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("sock")
        server.listen(1)
        assert read(ws, "sock") == NOT_BOUNDED
        assert write(ws, "sock", "x") == NOT_REGULAR_DEST
    finally:
        server.close()


@pytest.mark.timeout(120)
def test_directory_is_refused(ws: Workspace) -> None:
    (root(ws) / "dir" / "inner").mkdir(parents=True)
    assert read(ws, "dir") == NOT_BOUNDED
    assert read(ws, "dir/") == NOT_BOUNDED
    assert write(ws, "dir", "x") == NOT_REGULAR_DEST
    assert write(ws, "dir/inner", "x") == NOT_REGULAR_DEST
    assert (root(ws) / "dir" / "inner").is_dir()


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_device_node_inside_is_refused(ws: Workspace) -> None:
    os.mknod(root(ws) / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    os.mknod(root(ws) / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    assert read(ws, "zero") == NOT_BOUNDED
    assert read(ws, "null") == NOT_BOUNDED
    assert write(ws, "null", "x") == NOT_REGULAR_DEST
    assert stat.S_ISCHR(os.lstat(root(ws) / "null").st_mode)


@pytest.mark.timeout(120)
def test_device_via_symlink_is_outside(ws: Workspace) -> None:
    (root(ws) / "null").symlink_to("/dev/null")
    (root(ws) / "zero").symlink_to("/dev/zero")
    boundary = ("failed", "workspace_boundary", '{"message":"path leaves the workspace"}')
    assert read(ws, "null") == boundary
    assert read(ws, "zero") == boundary
    assert write(ws, "null", "x") == NOT_REGULAR_DEST


@pytest.mark.timeout(120)
def test_hard_link_to_an_outside_file(ws: Workspace) -> None:
    outside = root(ws).parent / "outside.txt"
    outside.write_bytes(CANARY)
    os.link(outside, root(ws) / "hard")
    assert read(ws, "hard") == NOT_BOUNDED
    # A write replaces the workspace's name; the outside inode is never opened for writing.
    assert write(ws, "hard", "mine") == ("success", None, '{"bytes":4,"path":"hard"}')
    assert outside.read_bytes() == CANARY
    assert os.stat(outside).st_nlink == 1


# --- sizes -------------------------------------------------------------------------------


def test_exactly_two_mib_reads_and_one_more_byte_does_not(ws: Workspace) -> None:
    (root(ws) / "max").write_bytes(b"a" * MIB2)
    (root(ws) / "over").write_bytes(b"a" * (MIB2 + 1))
    status, code, content = read(ws, "max")
    assert (status, code) == ("success", None)
    assert len(content) == MIB2 + len('{"content":"","path":"max"}')
    assert read(ws, "over") == NOT_BOUNDED


def test_size_is_counted_in_bytes_when_reading(ws: Workspace) -> None:
    two_byte = "\u00e9" * (MIB2 // 2)  # 2 MiB of UTF-8, half as many characters
    (root(ws) / "max").write_bytes(two_byte.encode())
    (root(ws) / "over").write_bytes((two_byte + "a").encode())
    outcome = read_file(ws, {"path": "max"})
    assert outcome.status.value == "success"
    assert outcome.content["content"] == two_byte
    assert read(ws, "over") == NOT_BOUNDED


def test_size_is_counted_in_bytes_when_writing(ws: Workspace) -> None:
    assert write(ws, "a", "a" * MIB2) == ("success", None, f'{{"bytes":{MIB2},"path":"a"}}')
    assert write(ws, "b", "a" * (MIB2 + 1)) == CONTENT_INVALID
    four_byte = "\U0001f600" * (MIB2 // 4)
    assert write(ws, "c", four_byte) == ("success", None, f'{{"bytes":{MIB2},"path":"c"}}')
    assert write(ws, "d", four_byte + "a") == CONTENT_INVALID
    assert (root(ws) / "c").read_bytes() == four_byte.encode()
    assert not (root(ws) / "b").exists() and not (root(ws) / "d").exists()


class _ReadSpy:
    """Wraps `os.read`, counting bytes, optionally appending to a file on the first call."""

    def __init__(self, real: Callable[[int, int], bytes], grow: Path | None = None) -> None:
        self.real = real
        self.grow = grow
        self.calls = 0
        self.total = 0

    def __call__(self, fd: int, size: int) -> bytes:
        if self.calls == 0 and self.grow is not None:
            with self.grow.open("ab") as handle:
                handle.write(b"g" * (1024 * 1024))
        self.calls += 1
        data = self.real(fd, size)
        self.total += len(data)
        return data


def test_sparse_huge_file_is_refused_without_reading(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (root(ws) / "sparse").open("wb") as handle:
        handle.truncate(1 << 40)
    spy = _ReadSpy(os.read)
    monkeypatch.setattr(os, "read", spy)
    assert read(ws, "sparse") == NOT_BOUNDED
    assert spy.calls == 0


def test_file_growing_during_the_read_is_refused(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = root(ws) / "grows"
    target.write_bytes(b"a" * MIB2)  # within the bound when it is opened and stat'ed
    spy = _ReadSpy(os.read, grow=target)
    monkeypatch.setattr(os, "read", spy)
    assert read(ws, "grows") == NOT_BOUNDED
    assert spy.total == MIB2 + 1


def test_bounded_read_helper_stops_one_byte_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"0123456789")
    spy = _ReadSpy(os.read, grow=target)
    monkeypatch.setattr(os, "read", spy)
    fd = os.open(target, os.O_RDONLY)
    try:
        with pytest.raises(NotBoundedRegularFile):
            read_bounded(fd, limit=10)
    finally:
        os.close(fd)
    assert spy.total == 11
    fd = os.open(target, os.O_RDONLY)
    try:
        assert len(read_bounded(fd, limit=MAX_FILE_BYTES)) == 10 + 1024 * 1024
    finally:
        os.close(fd)


# --- write arguments and semantics -------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": "f"},
        {"path": "f", "content": None},
        {"path": "f", "content": 5},
        {"path": "f", "content": ["x"]},
        {"path": "f", "content": "a\x00b"},
        {"path": "f", "content": "\x00"},
        {"path": "f", "content": "lone \ud800 surrogate"},
    ],
    ids=repr,
)
def test_invalid_content(ws: Workspace, arguments: dict[str, Any]) -> None:
    assert wire(write_file(ws, arguments)) == CONTENT_INVALID
    assert list(root(ws).iterdir()) == []


def test_argument_checks_come_before_the_grammar(ws: Workspace) -> None:
    assert write(ws, "", 5) == PATH_INVALID
    assert write(ws, "../x", 5) == CONTENT_INVALID
    assert write(ws, "../x", "ok") == INVALID_PATH


@pytest.mark.parametrize("content", ["", "\n", "  padded  \n", "a\r\nb\tc", "\u3000x\u3000"])
def test_content_is_written_untrimmed(ws: Workspace, content: str) -> None:
    size = len(content.encode())
    assert write(ws, "f.txt", content) == ("success", None, f'{{"bytes":{size},"path":"f.txt"}}')
    assert (root(ws) / "f.txt").read_bytes() == content.encode()
    outcome = read_file(ws, {"path": "f.txt"})
    assert outcome.content == {"content": content, "path": "f.txt"}


def test_write_creates_parents_and_modes(ws: Workspace) -> None:
    assert write(ws, "a/b/c/new.txt", "x") == (
        "success",
        None,
        '{"bytes":1,"path":"a/b/c/new.txt"}',
    )
    for directory in ("a", "a/b", "a/b/c"):
        assert stat.S_IMODE(os.stat(root(ws) / directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root(ws) / "a/b/c/new.txt").st_mode) == 0o600
    assert temps(root(ws)) == []


def test_write_replaces_an_existing_file(ws: Workspace) -> None:
    target = root(ws) / "f.txt"
    target.write_text("old")
    os.chmod(target, 0o644)
    inode = os.stat(target).st_ino
    assert write(ws, "f.txt", "new") == ("success", None, '{"bytes":3,"path":"f.txt"}')
    assert target.read_text() == "new"
    assert os.stat(target).st_ino != inode  # renamed over, never written in place
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert temps(root(ws)) == []


@pytest.fixture
def armed() -> Iterator[Callable[[str], None]]:
    yield fsio.arm_failpoints
    fsio.arm_failpoints("")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("workspace.write=eio", "Input/output error (failpoint workspace.write) (os error 5)"),
        ("workspace.fsync=eio", "Input/output error (failpoint workspace.fsync) (os error 5)"),
        (
            "workspace.rename=enospc",
            "No space left on device (failpoint workspace.rename) (os error 28)",
        ),
    ],
)
def test_write_failure_leaves_old_content_and_no_temp(
    ws: Workspace, armed: Callable[[str], None], spec: str, message: str
) -> None:
    (root(ws) / "f.txt").write_text("old")
    armed(spec)
    assert write(ws, "f.txt", "new") == ("failed", "file_write", compact({"message": message}))
    assert (root(ws) / "f.txt").read_text() == "old"
    assert temps(root(ws)) == []


def test_directory_sync_failure_is_reported(ws: Workspace, armed: Callable[[str], None]) -> None:
    """After the rename the new content is in place, yet the call reports the failure."""
    armed("workspace.dirsync=eio")
    assert write(ws, "f.txt", "new") == (
        "failed",
        "file_write",
        '{"message":"Input/output error (failpoint workspace.dirsync) (os error 5)"}',
    )
    assert temps(root(ws)) == []


def test_path_result_is_the_trimmed_argument(ws: Workspace) -> None:
    assert write(ws, "\u00a0 a//b/./c \n", "x") == (
        "success",
        None,
        '{"bytes":1,"path":"a//b/./c"}',
    )
    assert read(ws, " a/b/c") == ("success", None, '{"content":"x","path":"a/b/c"}')
