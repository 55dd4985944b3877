"""Where each skill server is and how to start it, resolved from the settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from singularity.config import Settings
from singularity.skills.config import HttpServer, HttpTransport, load_skills_file
from singularity.skills.environment import server_environment
from singularity.skills.stderr_log import server_log_path


@dataclass(frozen=True)
class StdioLaunch:
    """A child process: its argv, its whole environment, its working directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None = None
    initialize_extra: Mapping[str, Any] = field(default_factory=dict)
    """Members added to the `initialize` params (the Las `agentId`)."""
    stderr_log: str | None = None
    """The file its stderr is appended to; None: the runtime's own stderr."""


@dataclass(frozen=True)
class HttpLaunch:
    """An HTTP endpoint, the headers sent with every request, and how it is spoken to."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    transport: HttpTransport = "auto"
    """`streamable-http`, `sse`, or `auto`: streamable HTTP, else SSE if it is refused."""


@dataclass(frozen=True)
class Endpoint:
    """One skill server: how errors name it, how its tools are named, how to reach it."""

    label: str
    """`Las`, or `skill server <name>`: the subject of its error messages."""
    surface: str | None
    """The prefix of its tool names (`<surface>__<tool>`); None when already namespaced."""
    launch: StdioLaunch | HttpLaunch

    @property
    def is_las(self) -> bool:
        """Whether this is the Las aggregator, whose names are used as listed."""
        return self.surface is None


def logging_to(endpoints: Sequence[Endpoint], log_dir: str) -> list[Endpoint]:
    """The endpoints with each stdio server's stderr sent to `<log_dir>/<surface>.log`."""
    logged = []
    for endpoint in endpoints:
        launch = endpoint.launch
        if isinstance(launch, StdioLaunch):
            path = server_log_path(log_dir, endpoint.surface or "las")
            endpoint = replace(endpoint, launch=replace(launch, stderr_log=path))
        logged.append(endpoint)
    return logged


def file_endpoints(settings: Settings, environ: Mapping[str, str]) -> list[Endpoint]:
    """The servers of the skills file, in file order (none without a file)."""
    if settings.skills_file is None:
        return []
    endpoints = []
    for server in load_skills_file(settings.skills_file, environ):
        label = f"skill server {server.name}"
        if isinstance(server, HttpServer):
            launch: StdioLaunch | HttpLaunch = HttpLaunch(
                server.url, dict(server.headers), server.transport
            )
        else:
            argv = (server.command, *server.args)
            launch = StdioLaunch(argv, server_environment(server.env), server.cwd)
        endpoints.append(Endpoint(label, server.name, launch))
    return endpoints
