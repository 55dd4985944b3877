"""The console's guard: every request passes it, the event streams included.

- **Host and Origin.** Without a token the console serves loopback only and answers only
  requests whose `Host` names it on loopback (`127.0.0.1:<port>`, `localhost:<port>`,
  `[::1]:<port>`), so a page elsewhere cannot reach it by rebinding a name of its own to
  127.0.0.1. Any `Origin` sent must be the console's own.
- **Token.** With `--token-file` every request needs the token: a `Bearer` header, or the
  cookie the login form sets (it holds a digest of the token, never the token). A
  console bound to any address but loopback refuses to start without one.
- **CSRF.** Every request that is not GET or HEAD must come from the console's own pages:
  its `Origin` (or, lacking one, its `Referer`) is the console's, and it carries the
  `X-CSRF-Token` header that the pages hold, derived from the browser's session cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

from singularity.errors import ConfigurationError
from singularity.settings_check import is_loopback_host

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE = "singularity_session"
AUTH_COOKIE = "singularity_auth"
CSRF_HEADER = "x-csrf-token"
LOGIN_PATH = "/login"
SAFE_METHODS = ("GET", "HEAD")
MAX_TOKEN_BYTES = 4096
# Every response: no script, style or frame from anywhere but the console itself.
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def read_token(path: str) -> str:
    """The token in a file that only its owner may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise ConfigurationError(f"--token-file {path}: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigurationError(f"--token-file {path}: not a regular file")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ConfigurationError(f"--token-file {path}: readable by others; chmod 600 it")
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    token = data.decode("utf-8", "replace").strip()
    if len(data) > MAX_TOKEN_BYTES or len(token) < 16:
        raise ConfigurationError(f"--token-file {path}: the token must be 16 to 4096 bytes")
    return token


def _digest(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass
class Guard:
    """The security policy of one console process."""

    host: str
    port: int
    token: str | None = None
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def __post_init__(self) -> None:
        if not is_loopback_host(self.host) and self.token is None:
            raise ConfigurationError(
                f"the console listens on {self.host}, beyond loopback: give it --token-file"
            )

    @property
    def allowed_hosts(self) -> frozenset[str] | None:
        """The `Host` values answered; None (any) when a token guards every request."""
        if self.token is not None:
            return None
        names = {"127.0.0.1", "localhost", "[::1]"}
        if self.host not in ("0.0.0.0", "::"):
            names.add(self.host if ":" not in self.host else f"[{self.host.strip('[]')}]")
        return frozenset(f"{name}:{self.port}" for name in names)

    def auth_value(self) -> str:
        """What the login cookie holds: a digest of the token."""
        assert self.token is not None
        return _digest(self.key, "auth:" + self.token)

    def token_matches(self, given: str) -> bool:
        """Whether a token someone typed is the console's."""
        return self.token is not None and hmac.compare_digest(
            given.strip().encode("utf-8"), self.token.encode("utf-8")
        )

    def csrf_token(self, session: str) -> str:
        """The CSRF token of a browser session."""
        return _digest(self.key, "csrf:" + session)

    def middleware(self, app: App) -> App:
        """The ASGI app behind this guard."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return

            async def send_guarded(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", []), *HEADERS]
                await send(message)

            refusal = self.check(scope)
            if refusal is not None:
                status, text = refusal
                html = status == 401 and "text/html" in _headers(scope).get("accept", "")
                await _plain(send_guarded, status, text, html=html)
                return
            await app(scope, receive, send_guarded)

        return guarded

    def check(self, scope: Scope) -> tuple[int, str] | None:
        """Why a request is refused (status, text), or None when it may pass."""
        headers = _headers(scope)
        host = headers.get("host", "")
        allowed = self.allowed_hosts
        if allowed is not None and host not in allowed:
            return 403, "this console answers only to its own loopback address"
        origin = headers.get("origin")
        own = {f"http://{host}", f"https://{host}"}
        if origin is not None and origin not in own:
            return 403, "cross-origin requests are refused"
        method = scope.get("method", "GET")
        cookies = _cookies(headers)
        path = scope.get("path", "/")
        if self.token is not None and not self._authenticated(headers, cookies):
            if path == LOGIN_PATH or path.startswith("/static/"):
                return None if method in SAFE_METHODS or origin in own else (403, "bad origin")
            return 401, "log in first: this console needs its token"
        if method in SAFE_METHODS:
            return None
        if origin is None:
            referer = headers.get("referer", "")
            parts = urlsplit(referer)
            if f"{parts.scheme}://{parts.netloc}" not in own:
                return 403, "a state-changing request must come from the console's own page"
        session = cookies.get(SESSION_COOKIE)
        given = headers.get(CSRF_HEADER, "")
        if session is None or not hmac.compare_digest(given, self.csrf_token(session)):
            return 403, "missing or wrong CSRF token; reload the page"
        return None

    def _authenticated(self, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        bearer = headers.get("authorization", "")
        if bearer.startswith("Bearer ") and self.token_matches(bearer[len("Bearer ") :]):
            return True
        cookie = cookies.get(AUTH_COOKIE)
        return cookie is not None and hmac.compare_digest(cookie, self.auth_value())


def new_session() -> str:
    """A fresh browser session id."""
    return secrets.token_urlsafe(24)


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # a malformed cookie header is treated as no cookies
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


LOGIN_LINK = (
    '<!doctype html><meta charset="utf-8"><title>Log in</title>'
    '<p>{text}. <a href="/login">Log in</a></p>\n'
)


async def _plain(send: Send, status: int, text: str, *, html: bool = False) -> None:
    body = (LOGIN_LINK.format(text=text) if html else text + "\n").encode("utf-8")
    kind = b"text/html; charset=utf-8" if html else b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
