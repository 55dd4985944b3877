"""The skills file: MCP servers in the common `mcpServers` JSON format (decision 18).

    {"mcpServers": {
        "notes": {"command": "notes-mcp", "args": ["--db", "notes.db"], "env": {"HOME": "${HOME}"}},
        "search": {"url": "http://127.0.0.1:9000/mcp", "headers": {"X-Key": "${SEARCH_KEY}"}}
    }}

Each server's name is its surface: its tools become `<name>__<tool>`. A stdio server has
`command` (and optionally `args`, `env`, `cwd`); a remote server has `url` (and
optionally `headers`): a bare `url` is tried as streamable HTTP, then as SSE when the
server refuses the streamable handshake; `"type": "sse"` or `"type": "http"` fixes one.
`${NAME}` and `${NAME:-default}` in `env` and `headers` values are taken from the
runtime's environment. Other top-level keys are ignored, so a desktop client's config
file can be used as it is; unknown keys inside a server are errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from singularity.errors import ConfigurationError
from singularity.jsoncodec import loads_strict
from singularity.secrets import os_error_text

# Letters, digits, `-` and single `_`: `__` separates the surface from the tool name.
SURFACE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?=[A-Za-z0-9-])){0,31}")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_STDIO_KEYS = frozenset({"type", "command", "args", "env", "cwd", "disabled", "description"})
_HTTP_KEYS = frozenset({"type", "url", "headers", "disabled", "description"})
_STDIO_TYPES = frozenset({"stdio"})
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})
_SSE_TYPES = frozenset({"sse"})
_URL_TYPES = _HTTP_TYPES | _SSE_TYPES
HttpTransport = Literal["auto", "streamable-http", "sse"]


@dataclass(frozen=True)
class StdioServer:
    """A server started as a child process, spoken to over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True)
class HttpServer:
    """A server reached over HTTP: streamable HTTP, SSE, or the first that answers."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    transport: HttpTransport = "auto"


ServerConfig = StdioServer | HttpServer


def is_surface_name(name: str) -> bool:
    """1–32 letters, digits, `-`, `_`; no `__`, no leading or trailing `_`."""
    return SURFACE_NAME.fullmatch(name) is not None


def load_skills_file(path: str, environ: Mapping[str, str]) -> list[ServerConfig]:
    """Read and validate a skills file; every problem is a configuration error."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ConfigurationError(f"skills file {path}: {os_error_text(error)}") from None
    return parse_skills(data, path, environ)


def parse_skills(data: bytes | str, source: str, environ: Mapping[str, str]) -> list[ServerConfig]:
    """The enabled servers of a skills document, in file order."""
    try:
        document = loads_strict(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ConfigurationError(f"skills file {source}: not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"skills file {source}: must be a JSON object")
    servers = document.get("mcpServers")
    if not isinstance(servers, dict):
        raise ConfigurationError(f"skills file {source}: `mcpServers` must be an object")
    parsed: list[ServerConfig] = []
    for name, entry in servers.items():
        server = _server(name, entry, f"skills file {source}: server {name!r}", environ)
        if server is not None:
            parsed.append(server)
    return parsed


def _server(name: str, entry: Any, where: str, environ: Mapping[str, str]) -> ServerConfig | None:
    if not is_surface_name(name):
        raise ConfigurationError(
            f"{where}: a server name must be 1-32 letters, digits, `-` or single `_`"
        )
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: must be an object")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ConfigurationError(f"{where}: `disabled` must be true or false")
    kind = _kind(entry, where)
    allowed = _STDIO_KEYS if kind == "stdio" else _HTTP_KEYS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ConfigurationError(f"{where}: unknown key `{unknown[0]}` for a {kind} server")
    if disabled:
        return None
    if kind == "stdio":
        command = entry["command"]
        if not isinstance(command, str) or not command or "\x00" in command:
            raise ConfigurationError(f"{where}: `command` must be a non-empty string")
        cwd = entry.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd):
            raise ConfigurationError(f"{where}: `cwd` must be a non-empty string")
        return StdioServer(
            name,
            command,
            tuple(_strings(entry.get("args", []), f"{where}: `args`")),
            _expanded(entry.get("env", {}), f"{where}: `env`", environ),
            cwd,
        )
    url = entry["url"]
    if not isinstance(url, str) or not _is_http_url(url):
        raise ConfigurationError(f"{where}: `url` must be an http or https URL")
    declared = entry.get("type")
    transport: HttpTransport = (
        "auto" if declared is None else "sse" if declared in _SSE_TYPES else "streamable-http"
    )
    return HttpServer(
        name, url, _expanded(entry.get("headers", {}), f"{where}: `headers`", environ), transport
    )


def _kind(entry: dict[str, Any], where: str) -> str:
    declared = entry.get("type")
    if declared is not None:
        if not isinstance(declared, str):
            raise ConfigurationError(f"{where}: `type` must be a string")
        if declared not in _STDIO_TYPES | _URL_TYPES:
            raise ConfigurationError(f"{where}: unknown `type` {declared!r}")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        raise ConfigurationError(f"{where}: give either `command` or `url`, not both")
    if has_command and declared not in (None, *_STDIO_TYPES):
        raise ConfigurationError(f"{where}: `command` needs a stdio server")
    if has_url and declared not in (None, *_URL_TYPES):
        raise ConfigurationError(f"{where}: `url` needs an http or sse server")
    if not has_command and not has_url:
        raise ConfigurationError(f"{where}: needs `command` (stdio) or `url` (HTTP or SSE)")
    return "stdio" if has_command else "http"


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(
        isinstance(item, str) and "\x00" not in item for item in value
    ):
        raise ConfigurationError(f"{where} must be an array of strings")
    return list(value)


def _expanded(value: Any, where: str, environ: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where} must be an object of strings")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not key or "=" in key or "\x00" in key:
            raise ConfigurationError(f"{where}: invalid name {key!r}")
        if not isinstance(item, str) or "\x00" in item:
            raise ConfigurationError(f"{where}: `{key}` must be a string")
        result[key] = expand(item, environ, f"{where}: `{key}`")
    return result


def expand(text: str, environ: Mapping[str, str], where: str) -> str:
    """Replace `${NAME}` and `${NAME:-default}` with values from `environ`."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        if found is not None:
            return found
        raise ConfigurationError(f"{where} refers to ${{{name}}}, which is not set")

    return _VARIABLE.sub(value, text)


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
