"""The operator console end to end: a real browser (Debian's Chromium through Playwright)
on `singularity console`, over beings living as real processes on the scripted gateway.

Contract: the fleet table (children included) updates live while beings run; a chat
message sent from a being's page reaches its next model request and the reply appears
in the conversation; a sanctum edit shows its diff, saves, and reaches the next prompt;
a top-up raises the balance through an `operator_credited` ledger entry that is never
revenue; pause stops cycles (a message waits) until resume. Screenshots of the pages are
taken on the way (into docs/images with `make screenshots`).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.runtime.inspect.verify import verify_state_dir
from singularity.store.directory import peek_state
from singularity.testing.scripted_server import Turn
from tests.support.children_gateway import spawn_turn
from tests.support.children_procs import TAG, kill_tagged, new_tag
from tests.support.console import Console, ConsoleGateway, chromium, screenshot_path
from tests.support.living import Process, wait_until

CYCLE_SECS = 0.5
PERSONA_LINE = "Favourite colour: teal, chosen by my operator."


def plan(name: str, number: int) -> Turn | None:
    if name == "Ada" and number == 0:
        return spawn_turn("Byron", "BYR", "poetry", budget="2")
    if number == 1:
        return Turn.tool_call(
            "singularity_memory_remember", {"kind": "note", "text": f"{name} looked around"}
        )
    return None


@dataclass
class World:
    root: Path
    gateway: ConsoleGateway
    being: Process
    console: Console
    page: Any
    shots: Path

    def events(self, key: str = "ada") -> list[dict[str, Any]]:
        path = self.root.joinpath(*key.split("~"), "activity.jsonl")
        lines = path.read_text("utf-8").splitlines() if path.exists() else []
        found = []
        for line in lines:
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # a line being written right now
        return found

    def of_type(self, kind: str, key: str = "ada") -> list[dict[str, Any]]:
        return [event for event in self.events(key) if event["type"] == kind]

    def cycles(self) -> int:
        return len(self.of_type("cycle_started"))

    def wait(self, condition: Any, what: str) -> None:
        wait_until(condition, what, self.being)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("fleet")
    (root / "ws").mkdir()
    gateway = ConsoleGateway(plan)
    gateway.start()
    args = [
        "run",
        "--state-dir", str(root / "ada"),
        "--workspace", str(root / "ws"),
        "--brama-url", gateway.url,
        "--brama-model", "scripted-model",
        "--agent-name", "Ada",
        "--agent-ticker", "ADA",
        "--specialty", "cartography",
        "--cycle-interval-secs", str(CYCLE_SECS),
        "--input-price", "0.01",
        "--output-price", "0.02",
        "--log-format", "json",
    ]  # fmt: skip
    tag = new_tag()
    being = Process(args, root, root / "ada-run.txt", env={TAG: tag})
    console: Console | None = None
    try:
        console = Console(root, root / "console.txt")
        with chromium() as browser:
            page = browser.new_page()
            page.on("dialog", lambda dialog: dialog.accept())
            yield World(root, gateway, being, console, page, root)
    finally:
        if console is not None:
            console.stop()
        if being.process.poll() is None:
            being.process.send_signal(signal.SIGTERM)
            being.wait()
        being.stop()
        kill_tagged(tag)  # children outlive their parent
        gateway.stop()


def _cell(page: Any, name: str, column: str) -> str:
    row = page.locator("#fleet-rows tr", has=page.locator(f"a:text-is('{name}')"))
    return str(row.locator(f"td.{column}").inner_text())


def test_the_fleet_table_updates_live(world: World) -> None:
    page = world.page
    page.goto(world.console.url + "/")
    world.wait(
        lambda: page.locator("#fleet-rows a:text-is('Byron')").count() == 1, "Byron in the table"
    )
    first = int(_cell(page, "Ada", "cycle"))
    world.wait(
        lambda: int(_cell(page, "Ada", "cycle")) >= first + 2, "the cycle to advance on the page"
    )
    assert page.locator("#fleet-rows tr.depth-1 a:text-is('Byron')").count() == 1
    page.screenshot(path=str(screenshot_path(world.shots, "console-fleet.png")), full_page=True)


def test_beyond_loopback_a_request_without_the_token_is_refused(world: World) -> None:
    token_file = world.root / "console.token"
    token_file.write_text("browser-test-token-0123456789\n")
    token_file.chmod(0o600)
    guarded = Console(
        world.root, world.root / "console-token.txt",
        "--host", "0.0.0.0", "--token-file", str(token_file),
    )  # fmt: skip
    try:
        page = world.page.context.new_page()
        refused = page.goto(guarded.url + "/")
        assert refused is not None and refused.status == 401
        assert page.request.get(guarded.url + "/events/fleet").status == 401
        assert page.request.get(guarded.url + "/b/ada").status == 401
        page.click("text=Log in")
        page.fill("input[name=token]", "not-the-token")
        page.click("button[type=submit]")
        refusal = page.locator("p.error", has_text="That is not the token.")
        world.wait(lambda: refusal.count() == 1, "the refusal on the page")
        page.fill("input[name=token]", "browser-test-token-0123456789")
        page.click("button[type=submit]")
        page.wait_for_url(guarded.url + "/")
        first = int(_cell(page, "Ada", "cycle"))
        world.wait(lambda: int(_cell(page, "Ada", "cycle")) > first, "the table to update")
        page.close()
    finally:
        guarded.stop()


def test_a_chat_message_reaches_the_next_request_and_its_reply_appears(world: World) -> None:
    page = world.page
    page.goto(world.console.url + "/b/ada")
    page.fill("#chat-text", "Please map the northern coast.")
    page.click("#chat-send")
    world.wait(
        lambda: any(
            (r.json or {}).get("messages", [{}])[-1].get("content")
            == "Message from your operator: Please map the northern coast."
            for r in world.gateway.completions
        ),
        "the message in a model request",
    )
    reply = page.locator(
        "#conversation li.said", has_text="Heard you: Please map the northern coast."
    )
    world.wait(lambda: reply.count() >= 1, "the reply on the page")
    assert (
        page.locator("#conversation li.operator", has_text="Please map the northern coast.").count()
        >= 1
    )
    page.screenshot(path=str(screenshot_path(world.shots, "console-being.png")), full_page=True)


def test_a_sanctum_edit_shows_a_diff_saves_and_reaches_the_next_prompt(world: World) -> None:
    page = world.page
    page.goto(world.console.url + "/b/ada/sanctum?path=PERSONA.md")
    text = page.input_value("#sanctum-text")
    page.fill("#sanctum-text", text.rstrip("\n") + "\n\n" + PERSONA_LINE + "\n")
    page.click("#preview-diff")
    added = page.locator("pre.diff span.add", has_text=PERSONA_LINE)
    world.wait(lambda: added.count() == 1, "the diff")
    page.screenshot(path=str(screenshot_path(world.shots, "console-sanctum.png")), full_page=True)
    page.click("#save-edit")
    world.wait(lambda: page.locator("#save-notice .notice.ok").count() == 1, "the save notice")
    world.wait(
        lambda: any(
            PERSONA_LINE in (r.json or {}).get("messages", [{}])[0].get("content", "")
            for r in world.gateway.completions
        ),
        "the edit in a system message",
    )
    written = world.of_type("operator_sanctum_written")
    assert [(e["path"], e["bytes"]) for e in written] == [
        ("PERSONA.md", len((text.rstrip("\n") + "\n\n" + PERSONA_LINE + "\n").encode()))
    ]
    assert PERSONA_LINE in (world.root / "ada" / "sanctum" / "PERSONA.md").read_text()
    page.goto(world.console.url + "/b/ada/sanctum?path=PERSONA.md")
    assert page.locator("table.history td", has_text="operator").count() >= 1


def _balance(world: World) -> Decimal:
    return Decimal(world.page.inner_text("#being-balance"))


def test_a_top_up_raises_the_balance_through_an_operator_credit(world: World) -> None:
    page = world.page
    page.goto(world.console.url + "/b/ada")
    before = _balance(world)
    page.fill("#topup-amount", "5")
    page.fill("input[name=note]", "monthly allowance")
    page.click("#topup-send")
    world.wait(lambda: len(world.of_type("operator_credited")) == 1, "the credit in the ledger")
    world.wait(lambda: _balance(world) > before + Decimal("4.9"), "the new balance on the page")
    credit = world.of_type("operator_credited")[0]
    assert (credit["amount"], credit["note"]) == ("5", "monthly allowance")
    state = peek_state(str(world.root / "ada"))  # the living being: state.json + state.redo
    assert state is not None and state.budget.operator_credited == Decimal(5)
    assert state.budget.earned == Decimal(0)
    assert world.of_type("revenue_credited") == []


def test_pause_stops_cycles_until_resume(world: World) -> None:
    page = world.page
    page.goto(world.console.url + "/b/ada")
    page.click("#pause")
    world.wait(lambda: page.locator("#being-status", has_text="paused").count() == 1, "paused")
    paused_at = time.monotonic()
    cycles = world.cycles()
    page.fill("#chat-text", "Are you there?")
    page.click("#chat-send")
    world.wait(lambda: page.locator("#waiting li").count() == 1, "the message waiting")
    world.wait(lambda: time.monotonic() - paused_at > 6 * CYCLE_SECS, "several cycle intervals")
    assert world.cycles() == cycles
    page.click("#resume")
    reply = page.locator("#conversation li.said", has_text="Heard you: Are you there?")
    world.wait(lambda: reply.count() >= 1, "the reply after resume")
    kinds = [e["type"] for e in world.events()]
    paused = kinds.index("operator_paused")
    resumed = kinds.index("operator_resumed")
    assert "cycle_started" not in kinds[paused:resumed]
    page.click("#stop")
    world.wait(lambda: world.being.process.poll() is not None, "the being to stop")
    assert world.being.wait() == 0
    assert verify_state_dir(str(world.root / "ada")) == []
