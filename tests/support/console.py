"""The console as a real subprocess, Debian's Chromium driven by Playwright, and a gateway
that answers an operator's message so a test can see the reply arrive."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from singularity.jsoncodec import compact
from singularity.testing.scripted_server import RecordedRequest, Turn
from tests.support.children_gateway import FamilyGateway, Plan
from tests.support.living import Process, wait_until

CHROMIUM = "/usr/bin/chromium"
# The flags this machine needs (no sandbox as root; no background traffic to the closed
# network), and a fresh profile for every launch.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LISTENING = re.compile(r"console listening on (http://\S+?)/?$", re.MULTILINE)
SCREENSHOTS_ENV = "SINGULARITY_CONSOLE_SCREENSHOTS"
BROWSER_TIMEOUT_MS = 180_000
"""How long a page waits to load, or an element to be ready for a click (Playwright's own
default, 30 s, is within reach of a loaded machine; this is a hang detector)."""


def operator_words(document: Any) -> str | None:
    """The operator's message, when it is the newest message of a completion request."""
    if not isinstance(document, dict) or not document.get("messages"):
        return None
    last = document["messages"][-1]
    if last.get("role") == "user" and last.get("name") == "operator":
        return str(last.get("content"))
    return None


class ConsoleGateway(FamilyGateway):
    """A family gateway that answers a request ending in an operator's message with
    `Heard you: <the message>`."""

    def __init__(self, plan: Plan, **options: Any) -> None:
        super().__init__(plan, **options)

    def _complete(self, handler: Any, request: RecordedRequest) -> None:
        words = operator_words(request.json)
        if words is None:
            super()._complete(handler, request)
            return
        answer = Turn.text("Heard you: " + words.removeprefix("Message from your operator: "))
        handler.reply(200, compact(self._completion(answer, request)).encode("utf-8"))


class Console:
    """`singularity console` over a root directory (or, given `state_url`, a PostgreSQL
    state store, run from `root`), on a free port."""

    def __init__(self, root: Path, log: Path, *flags: str, state_url: str | None = None) -> None:
        place = ["--state-url", state_url] if state_url is not None else ["--root", str(root)]
        self.process = Process(["console", *place, "--port", "0", *flags], root, log)
        found: list[str] = []

        def listening() -> bool:
            match = LISTENING.search(self.process.stderr())
            if match:
                found.append(match.group(1))
            return bool(found)

        wait_until(listening, "the console to listen", self.process)
        self.url = found[0].replace("0.0.0.0", "127.0.0.1")

    def stop(self) -> None:
        """End the console."""
        self.process.stop()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright browser context on Debian's Chromium with a fresh profile."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="singularity-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": 1280, "height": 900},
            )
            context.set_default_timeout(BROWSER_TIMEOUT_MS)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def screenshot_path(tmp: Path, name: str) -> Path:
    """Where a screenshot goes: the folder `SINGULARITY_CONSOLE_SCREENSHOTS` names
    (`make screenshots` sets it to docs/images), else the test's own directory."""
    folder = os.environ.get(SCREENSHOTS_ENV)
    target = Path(folder) if folder else tmp
    target.mkdir(parents=True, exist_ok=True)
    return target / name
