"""Skills against third-party MCP servers: the reference servers as a user installs them.

`@modelcontextprotocol/server-everything` and `@modelcontextprotocol/server-filesystem`
(npm, pinned in `tests/mcp-servers/package-lock.json`, run with the machine's Node.js)
and `mcp-server-time` (PyPI, the `[reference-servers]` extra) are installed by `make
setup-tests` and started here through an `mcpServers` skills file, as a user would.

Contract (decisions 18, 21, 25): their tools are discovered and listed by `singularity
tools`; their results reach the model intact under the default boundary (a directory
listing, a file written, and a workspace path shown relative to the workspace); their
errors are failed `remote_tool` outcomes the model can read; a server killed while a
call is in flight costs only that call (indeterminate, journaled) and is restarted for
the next; a bare `url` works whether the server speaks streamable HTTP or SSE, and one
that speaks neither gets an error naming both; a server's stderr goes to
`<state-dir>/logs/<name>.log`, never to the terminal.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import McpError
from singularity.skills import plan_skills, start_skills
from singularity.testing.scripted_server import Call, RecordedRequest, ScriptedServer, Turn
from singularity.testing.scripted_server import _Handler as Handler
from tests.servers import write_skills
from tests.support.living import terminate
from tests.support.loop_http import Result, all_events, boot, cli_args, run
from tests.support.polling import DEFAULT_TIMEOUT, wait_for
from tests.support.ports import serve_on_free_port

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "tests" / "mcp-servers" / "node_modules" / "@modelcontextprotocol"
EVERYTHING = PACKAGES / "server-everything" / "dist" / "index.js"
FILESYSTEM = PACKAGES / "server-filesystem" / "dist" / "index.js"
TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")
NODE = shutil.which("node")
TIMEOUT = "180"  # a loaded machine needs seconds to start an MCP server
EVERYTHING_TOOLS = [
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
    "simulate-research-query",
]
FILESYSTEM_TOOLS = [
    "read_file",
    "read_text_file",
    "read_media_file",
    "read_multiple_files",
    "write_file",
    "edit_file",
    "create_directory",
    "list_directory",
    "list_directory_with_sizes",
    "directory_tree",
    "move_file",
    "search_files",
    "get_file_info",
    "list_allowed_directories",
]
TIME_TOOLS = ["get_current_time", "convert_time"]


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    missing = [str(path) for path in (EVERYTHING, FILESYSTEM, TIME_SERVER) if not path.exists()]
    if NODE is None or missing:
        pytest.fail(
            f"the reference MCP servers are not installed ({missing or 'node'}): run `make setup-tests`"
        )


def node() -> str:
    assert NODE is not None
    return NODE


def reference_servers(ws: Path) -> dict[str, Any]:
    """The three servers, configured as their READMEs show (the filesystem on `ws`)."""
    return {
        "everything": {"command": node(), "args": [str(EVERYTHING), "stdio"]},
        "filesystem": {"command": node(), "args": [str(FILESYSTEM), str(ws)]},
        "time": {"command": str(TIME_SERVER), "args": ["--local-timezone", "UTC"]},
    }


def skills_file(root: Path, servers: dict[str, Any]) -> str:
    return str(write_skills(root / "skills.json", servers))


def seen(request: RecordedRequest) -> dict[str, dict[str, Any]]:
    """The tool messages a completion request carried, parsed, by call id."""
    messages = request.json["messages"]
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


def text_of(message: dict[str, Any]) -> str:
    [item] = message["content"]["content"]
    assert item["type"] == "text"
    return str(item["text"])


# --- discovery ---------------------------------------------------------------------------


def test_tools_lists_every_reference_server_tool_in_file_order(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    (tmp_path / "ws").mkdir()
    skills = skills_file(tmp_path, reference_servers(tmp_path / "ws"))
    result = cli("tools", "--skills", skills)
    assert result.code == 0, result.err
    names = [tool["name"] for tool in json.loads(result.out)]
    assert names[:-24] == [
        *(f"everything__{name}" for name in EVERYTHING_TOOLS),
        *(f"filesystem__{name}" for name in FILESYSTEM_TOOLS),
        *(f"time__{name}" for name in TIME_TOOLS),
    ]
    assert names[-24] == "singularity_memory_remember"
    schema = next(t for t in json.loads(result.out) if t["name"] == "filesystem__write_file")
    assert set(schema["parameters"]["required"]) == {"path", "content"}


# --- calls whose results reach the model -------------------------------------------------


def test_a_being_uses_the_reference_servers_and_the_model_sees_their_results(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    skills = skills_file(tmp_path, reference_servers(ws))
    calls = [
        Call(
            "filesystem__write_file",
            json.dumps({"path": "hello.txt", "content": "Hello\n"}),
            "write",
        ),
        Call(
            "filesystem__write_file",
            json.dumps({"path": f"{ws}/second.txt", "content": "2"}),
            "write_abs",
        ),
        Call("filesystem__list_directory", '{"path": "."}', "list"),
        Call("filesystem__read_text_file", '{"path": "hello.txt"}', "read"),
        Call("everything__echo", '{"message": "hi there"}', "echo"),
        Call("everything__get-sum", '{"a": 2, "b": 3}', "sum"),
        Call(
            "time__convert_time",
            json.dumps(
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            ),
            "convert",
        ),
        # server errors
        Call("filesystem__read_text_file", '{"path": "missing.txt"}', "missing"),
        Call("filesystem__read_text_file", '{"path": "/etc/hostname"}', "outside"),
        Call("time__get_current_time", '{"timezone": "Mars/Olympus"}', "badzone"),
    ]
    with ScriptedServer([Turn.tool_calls(*calls), Turn.text("done")]) as server:

        async def live() -> None:
            runtime = boot(tmp_path, server, skills_file=skills, mcp_timeout_secs=TIMEOUT)
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        run(live())
        messages = seen(server.completions[1])

    assert (ws / "hello.txt").read_text() == "Hello\n"
    assert (ws / "second.txt").read_text() == "2"
    ok = {key: messages[key] for key in ("write", "list", "read", "echo", "sum", "convert")}
    for message in ok.values():
        assert (message["status"], message["error_code"], "redacted" in message) == (
            "success",
            None,
            False,
        )
    # The results are the servers' own, unchanged.
    assert messages["write"]["content"] == {
        "content": [{"text": "Successfully wrote to hello.txt", "type": "text"}],
        "structuredContent": {"content": "Successfully wrote to hello.txt"},
    }
    assert sorted(text_of(messages["list"]).splitlines()) == [
        "[FILE] hello.txt",
        "[FILE] second.txt",
    ]
    assert text_of(messages["read"]) == "Hello\n"
    assert text_of(messages["echo"]) == "Echo: hi there"
    assert text_of(messages["sum"]) == "The sum of 2 and 3 is 5."
    converted = json.loads(text_of(messages["convert"]))
    assert (converted["target"]["timezone"], converted["time_difference"]) == (
        "Asia/Tokyo",
        "+9.0h",
    )
    assert converted["target"]["datetime"].endswith("T21:00:00+09:00")
    # A workspace path the server echoes back is shown relative to the workspace.
    assert text_of(messages["write_abs"]) == "Successfully wrote to second.txt"
    assert messages["write_abs"]["redacted"] == {
        "count": 2,
        "reasons": {"workspace path shown relative": 2},
    }
    # Server errors are failed remote_tool outcomes the model can read.
    for key in ("missing", "outside", "badzone"):
        assert (messages[key]["status"], messages[key]["error_code"]) == ("failed", "remote_tool")
        assert messages[key]["content"]["isError"] is True
    assert text_of(messages["missing"]) == "ENOENT: no such file or directory, open 'missing.txt'"
    assert text_of(messages["outside"]) == (
        "Access denied - path outside allowed directories: <redacted: local path> not in ."
    )
    assert "Invalid timezone" in text_of(messages["badzone"])
    assert str(ws) not in json.dumps(messages)
    # Each server's stderr went to its log, none to the terminal.
    logs = tmp_path / "being" / "logs"
    assert "Secure MCP Filesystem Server running on stdio" in (logs / "filesystem.log").read_text()
    assert (logs / "everything.log").exists() and (logs / "time.log").exists()
    assert oct((logs / "filesystem.log").stat().st_mode & 0o777) == "0o600"
    assert oct(logs.stat().st_mode & 0o777) == "0o700"


def test_a_servers_stderr_never_reaches_the_terminal(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    (tmp_path / "ws").mkdir()
    skills = skills_file(tmp_path, {"filesystem": reference_servers(tmp_path / "ws")["filesystem"]})
    with ScriptedServer(
        [Turn.tool_call("filesystem__list_directory", {"path": "."}), Turn.text("done")]
    ) as server:
        result = cli(
            "once",
            *cli_args(tmp_path, server, "--skills", skills),
            SINGULARITY_MCP_TIMEOUT_SECS=TIMEOUT,
        )
    assert result.code == 0, result.err
    assert "Secure MCP Filesystem Server" not in result.err
    assert "→ filesystem__list_directory success" in result.err
    log = tmp_path / "being" / "logs" / "filesystem.log"
    assert "Secure MCP Filesystem Server running on stdio" in log.read_text()
    assert (
        subprocess.run(
            [sys.executable, "-m", "singularity", "verify", str(tmp_path / "being")],
            capture_output=True,
            text=True,
        ).returncode
        == 0
    )


# --- a server killed mid-call ------------------------------------------------------------


class GatedServer(ScriptedServer):
    """A scripted gateway that holds its first completion until `gate` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def _complete(self, handler: Handler, request: RecordedRequest) -> None:
        if len(self.completions) == 1 and not self.gate.wait(DEFAULT_TIMEOUT):
            raise TimeoutError("the gate was never opened")
        super()._complete(handler, request)


def _server_pid(script: Path) -> int | None:
    """The pid of this process's child running `script`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        if parent == os.getpid() and str(script).encode() in cmdline:
            return int(entry)
    return None


def _unread_stdin(pid: int) -> int:
    """Bytes waiting in the process's stdin pipe (FIONREAD on a second reader of it)."""
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    finally:
        os.close(fd)


def _kill_during_the_call(server: GatedServer) -> None:
    """Stop the server, let the model's call go out, kill the server with the call unread."""
    wait_for(lambda: len(server.completions) >= 1, "the first completion")
    wait_for(lambda: _server_pid(EVERYTHING) is not None, "the everything server")
    pid = _server_pid(EVERYTHING)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    server.gate.set()
    wait_for(lambda: _unread_stdin(pid) > 0, "the tools/call request in the server's stdin")
    os.kill(pid, signal.SIGKILL)


def test_a_server_killed_mid_call_costs_only_that_call(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    skills = skills_file(tmp_path, {"everything": reference_servers(tmp_path / "ws")["everything"]})
    script = [
        Turn.tool_call("everything__echo", {"message": "lost"}, call_id="lost"),
        Turn.tool_call("everything__echo", {"message": "again"}, call_id="again"),
        Turn.text("done"),
    ]
    with GatedServer(script) as server:

        async def live() -> None:
            runtime = boot(tmp_path, server, skills_file=skills, mcp_timeout_secs=TIMEOUT)
            try:
                await asyncio.gather(
                    runtime.once(), asyncio.to_thread(_kill_during_the_call, server)
                )
            finally:
                await runtime.shutdown()

        run(live())
        lost = seen(server.completions[1])["lost"]
        again = seen(server.completions[2])["again"]
    assert lost == {
        "chat_id": None,
        "content": {"message": "mcp: skill server everything closed stdout during tools/call"},
        "error_code": "mcp",
        "message_id": None,
        "status": "indeterminate",
    }
    assert (again["status"], text_of(again)) == ("success", "Echo: again")
    events = all_events(tmp_path)
    assert [e["status"] for e in events if e["type"] == "tool_finished"] == [
        "indeterminate",
        "success",
    ]
    assert [e["message"] for e in events if e["type"] == "warning"] == [
        "mcp: skill server everything stopped during tools/call; it will be restarted for later calls",
        "mcp: skill server everything was restarted",
    ]


# --- remote servers: streamable HTTP, SSE, neither ----------------------------------------


@contextmanager
def everything_over_http(transport: str) -> Iterator[int]:
    """server-everything over `sse` or `streamableHttp` on a free loopback port."""
    process, port = serve_on_free_port(
        lambda port: subprocess.Popen(
            [node(), str(EVERYTHING), transport],
            env={"PATH": os.environ.get("PATH", ""), "PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        f"server-everything {transport}",
    )
    try:
        yield port
    finally:
        terminate(process)


def test_a_bare_url_works_for_sse_and_streamable_http_servers(tmp_path: Path) -> None:
    with (
        everything_over_http("sse") as sse_port,
        everything_over_http("streamableHttp") as http_port,
    ):
        servers = {
            "legacy": {"url": f"http://127.0.0.1:{sse_port}/sse"},
            "modern": {"url": f"http://127.0.0.1:{http_port}/mcp"},
        }
        skills = skills_file(tmp_path, servers)
        calls = [
            Call("legacy__echo", '{"message": "over sse"}', "sse"),
            Call("modern__get-sum", '{"a": 20, "b": 22}', "http"),
        ]
        with ScriptedServer([Turn.tool_calls(*calls), Turn.text("done")]) as server:

            async def live() -> None:
                runtime = boot(tmp_path, server, skills_file=skills, mcp_timeout_secs=TIMEOUT)
                try:
                    await runtime.once()
                finally:
                    await runtime.shutdown()

            run(live())
            messages = seen(server.completions[1])
    assert text_of(messages["sse"]) == "Echo: over sse"
    assert text_of(messages["http"]) == "The sum of 20 and 22 is 42."


def test_an_explicit_sse_type_and_a_url_that_speaks_neither(tmp_path: Path) -> None:
    with everything_over_http("sse") as port, ScriptedServer([]) as not_mcp:
        servers = {"legacy": {"type": "sse", "url": f"http://127.0.0.1:{port}/sse"}}
        settings = resolve({"skills_file": skills_file(tmp_path, servers)}, environ={})
        skills = start_skills(plan_skills(settings), timeout=float(TIMEOUT), grace=5.0)
        try:
            assert skills.tool_names[0] == "legacy__echo"
        finally:
            skills.close()
        url = f"{not_mcp.url}nothing-here?key=hidden"
        settings = resolve(
            {"skills_file": skills_file(tmp_path, {"ghost": {"url": url}})}, environ={}
        )
        with pytest.raises(McpError) as caught:
            start_skills(plan_skills(settings), timeout=float(TIMEOUT), grace=5.0)
    message = str(caught.value)
    assert message == (
        f"mcp: skill server ghost at {not_mcp.url}nothing-here answered neither streamable "
        "HTTP (Not Found) nor SSE (skill server ghost failed during initialize: HTTP 404 Not Found)"
    )
    assert "-32601" not in message and "hidden" not in message
