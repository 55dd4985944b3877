"""Talking to a being and reading what it lived: `singularity say` and `singularity log`."""

from __future__ import annotations

import time
from typing import Any

import click

from singularity.cli.options import settings_from, store_options, wait_options
from singularity.cli.output import print_json
from singularity.domain.operator import new_request
from singularity.errors import RuntimeFailure
from singularity.jsoncodec import compact
from singularity.runtime.being import place_of
from singularity.runtime.talk.being_feed import open_feed
from singularity.runtime.talk.operator_client import deliver_at, wait_for_reply
from singularity.runtime.talk.transcript import Entry, Transcript
from singularity.timestamps import now_text

FOLLOW_SECS = 0.5


@click.command()
@store_options
@wait_options("With --wait: give up after this many seconds [default: wait as long as it takes].")
@click.argument("text")
def say(text: str, wait: bool, timeout: float | None, **params: Any) -> None:
    """Send a message to a being; it reads it at the start of its next cycle."""
    settings = settings_from(params, on_postgres=True)
    place = place_of(settings)
    request = new_request("message", now_text(), text=text)
    feed = open_feed(place, settings.agent_id) if wait else None
    try:
        delivery = deliver_at(place, settings.agent_id, request)
        if feed is None:
            print_json({"request_id": delivery.request_id, "route": delivery.route})
            return
        outcome = wait_for_reply(feed, request.id, timeout=timeout)
    finally:
        if feed is not None:
            feed.close()
    if outcome.status != "completed" or outcome.reply is None:
        raise RuntimeFailure(
            f"cycle {outcome.cycle} read the message but ended {outcome.status} "
            "without a plain reply"
        )
    click.echo(outcome.reply)


LINES = {
    "framing": "  {text}",
    "observation": "observation: {text}",
    "operator": "operator: {text}",
    "being": "being: {text}",
    "call": "  → {tool} {text}",
    "result": "  ← {tool} {status}: {text}",
}
"""How each kind of transcript entry reads (a cycle and a cost have their own lines)."""


def render(entry: Entry) -> str:
    """One transcript entry as a line of text."""
    kind = entry.kind
    if kind == "cycle":
        at = entry.extra.get("at")
        return f"── cycle {entry.cycle}" + (f" · {at}" if at else "") + " ──"
    if kind == "cost":
        extra = entry.extra
        return (
            f"  · round cost {extra['amount']} USD "
            f"({extra['prompt_tokens']} prompt + {extra['completion_tokens']} completion tokens)"
        )
    line = LINES.get(kind)
    if line is None:
        return f"{kind}: {entry.text}"
    return line.format(text=entry.text, tool=entry.tool, status=entry.status)


@click.command(name="log")
@store_options
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the being lives.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
def log_command(follow: bool, as_json: bool, **params: Any) -> None:
    """Print a being's conversation and actions as a transcript, archived messages included."""
    settings = settings_from(params, on_postgres=True)
    feed = open_feed(place_of(settings), settings.agent_id)
    try:
        builder = Transcript()
        while True:
            events, messages = feed.next()
            builder.add_events(events)
            for entry in builder.add_messages(messages):
                click.echo(compact(entry.to_json()) if as_json else render(entry))
            if not follow:
                return
            time.sleep(FOLLOW_SECS)
    finally:
        feed.close()
