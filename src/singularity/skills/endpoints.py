"""Where each skill server is and how to start it, resolved from the settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from singularity.config import Settings
from singularity.skills.config import HttpServer, load_skills_file
from singularity.skills.environment import server_environment


@dataclass(frozen=True)
class StdioLaunch:
    """A child process: its argv, its whole environment, its working directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None = None
    initialize_extra: Mapping[str, Any] = field(default_factory=dict)
    """Members added to the `initialize` params (the Las `agentId`)."""


@dataclass(frozen=True)
class HttpLaunch:
    """A streamable-HTTP endpoint and the headers sent with every request."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


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


def file_endpoints(settings: Settings, environ: Mapping[str, str]) -> list[Endpoint]:
    """The servers of the skills file, in file order (none without a file)."""
    if settings.skills_file is None:
        return []
    endpoints = []
    for server in load_skills_file(settings.skills_file, environ):
        label = f"skill server {server.name}"
        if isinstance(server, HttpServer):
            launch: StdioLaunch | HttpLaunch = HttpLaunch(server.url, dict(server.headers))
        else:
            argv = (server.command, *server.args)
            launch = StdioLaunch(argv, server_environment(server.env), server.cwd)
        endpoints.append(Endpoint(label, server.name, launch))
    return endpoints
