"""The fuzz tier: generated input to every parser of outside data (see docs/threat-model.md).

Contract: whatever the bytes, each parser returns a result or raises its documented error
class with a message, never anything else; and a state that loads is saved and loads
again. Covered: `state.json`, `activity.jsonl` with the boot-time ledger replay and
`verify`'s checks, import documents and their merge, gateway responses and error bodies,
MCP stdout lines and the outcome they become, configuration values (flags, environment,
TOML), and the import socket (its request decoding, and real connections to a living
being's socket). The default tier tries 5,000 inputs in all; the slow tier 100,000.

Each target counts the inputs it ran and what became of them, and asserts that both the
accepted and the refused outcome were reached, so a strategy that only ever produced
garbage (or only valid input) fails.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from random import Random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from singularity.config import ALL_OPTIONS, resolve
from singularity.domain.state import AgentState, parse_state
from singularity.errors import (
    BramaError,
    ConfigurationError,
    JsonFailure,
    SingularityError,
    StateError,
)
from singularity.gateway.client import http_error_message
from singularity.gateway.wire import parse_completion
from singularity.jsoncodec import compact
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.inspect.invariants import (
    check_budget_against_journal,
    check_ledger_against_journal,
    check_state_invariants,
)
from singularity.runtime.inspect.summary import summarize
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.mind_import.document import merge, parse_import
from singularity.runtime.mind_import.service import ImportService, decode_request, socket_path
from singularity.secrets import Scrubber
from singularity.settings_check import check_identity, check_numbers, check_stimulus, check_url
from singularity.skills.toolset import outcome_of
from singularity.skills.transport import _parse as parse_mcp_line
from singularity.storage.activity import scan
from singularity.testing.scripted_server import ScriptedServer
from singularity.text import safe_json
from singularity.tools.catalogue import tool_message
from singularity.tools.output_boundary import STRICT, OutputBoundary
from tests.support.fuzzing import (
    SEEDS,
    documents,
    hostile_text,
    hostile_value,
    mutated,
    render,
)
from tests.support.import_socket import ask
from tests.support.loop_http import settings as being_settings

FIXTURES = Path(__file__).parent / "fixtures"
RICH_STATE = json.loads((FIXTURES / "state" / "rich-being.json").read_text("utf-8"))
VALID_IMPORT = json.loads((FIXTURES / "import" / "valid.json").read_text("utf-8"))
# Inputs per target; the default tier's sum is 5,000, the slow tier's 100,000.
DEFAULT_INPUTS = {
    "state": 800,
    "journal": 800,
    "import": 700,
    "gateway": 800,
    "mcp": 700,
    "configuration": 600,
    "socket request": 400,
    "socket": 200,
}
SLOW_FACTOR = 20
Outcomes = Counter[str]


def _run(examples: int, strategy: st.SearchStrategy[Any], check: Callable[[Any], str]) -> Outcomes:
    """Run `check` on `examples` inputs; count the outcome names it returns."""
    outcomes: Outcomes = Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
    )
    @given(strategy)
    def fuzz(value: Any) -> None:
        outcomes[check(value)] += 1

    fuzz()
    outcomes["inputs"] = sum(outcomes.values())
    return outcomes


def refused(error: SingularityError, outcome: str = "refused") -> str:
    """A refusal is a clear error: a message that says something and can be printed."""
    assert error.message.strip(), f"{type(error).__name__} with no message"
    assert "Traceback" not in error.message
    str(error).encode("utf-8")  # strict: the message reaches a terminal or a reply as it is
    return outcome


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs where there is one: journal appends sync there for nothing."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)
    with tempfile.TemporaryDirectory(dir=base) as directory:
        yield Path(directory)


# --- state.json --------------------------------------------------------------------------


def _loads_again(state: AgentState) -> None:
    again = parse_state(state.to_json())
    assert again.to_json() == state.to_json()


def check_state_file(data: bytes) -> str:
    try:
        state = parse_state(data)
    except (JsonFailure, StateError) as error:
        return refused(error)
    _loads_again(state)
    summarize(state)
    check_state_invariants(state)
    return "loaded"


def fuzz_state_files(examples: int) -> Outcomes:
    return _run(examples, documents(RICH_STATE), check_state_file)


# --- activity.jsonl and the ledger replay at boot ------------------------------------------

LEDGER_TYPES = (
    "cost_reserved",
    "cost_debited",
    "cost_released",
    "revenue_credited",
    "child_funded",
    "child_refunded",
    "warning",
)
VALID_AMOUNTS = ("0", "0.25", "1", "3.5", "1e-12", "0.0000001")
BAD_AMOUNTS = ("-1", "1e61", "1e59", "9" * 60, "79228162514264337593543950336", "x")


def _amount(rng: Random) -> Any:
    roll = rng.random()
    if roll < 0.7:
        return rng.choice(VALID_AMOUNTS)
    return rng.choice(BAD_AMOUNTS) if roll < 0.85 else hostile_value(rng)


def ledger_event(rng: Random) -> dict[str, Any]:
    """A journal event of a ledger type, its fields mostly right, sometimes anything."""
    event: dict[str, Any] = {
        "type": rng.choice(LEDGER_TYPES),
        "at": "2026-01-02T03:04:05Z" if rng.random() < 0.9 else hostile_text(rng),
        "cycle": rng.randrange(4) if rng.random() < 0.9 else hostile_value(rng),
        "operation_id": rng.choice(("op-1", "op-2", "op-3", "op-4", 7, None)),
    }
    for name in ("amount", "api", "instance"):
        if rng.random() < 0.8:
            event[name] = _amount(rng)
    if rng.random() < 0.8:
        roll = rng.random()
        event["tokens"] = (
            rng.randrange(5000) if roll < 0.7 else rng.choice((-3, 2**64, 2**65, 1.5, "9"))
        )
    if rng.random() < 0.2:
        event[hostile_text(rng)] = hostile_value(rng)
    return event


def hostile_journal(seed: int) -> tuple[bytes, str | None]:
    """Journal bytes of ledger events, now and then a garbage or deep line or a torn tail."""
    rng = Random(seed)
    lines = [render(ledger_event(rng)) for _ in range(rng.randrange(9))]
    if rng.random() < 0.25:
        garbage = rng.choice(
            (
                bytes(rng.randrange(256) for _ in range(rng.randrange(40))),
                b'{"type":"warning","x":' + b"[" * 3000 + b"]" * 3000 + b"}",
            )
        )
        lines.insert(rng.randrange(len(lines) + 1), garbage)
    tail = rng.choice((b"", b"", b"", b'{"type":"torn', b"\xff"))
    return b"".join(line + b"\n" for line in lines) + tail, rng.choice((None, "op-1"))


def replay_journal(being: LiveBeing, fresh: AgentState, value: tuple[bytes, str | None]) -> str:
    data, last_operation = value
    try:
        events = scan(data).events
    except StateError as error:
        return refused(error, "journal refused")
    check_budget_against_journal(fresh, events)
    check_ledger_against_journal(fresh, events)
    being.state = fresh.model_copy(deep=True)
    being.state.budget.last_operation = last_operation
    try:
        applied = ledger.reconcile(being, events)
    except StateError as error:
        return refused(error, "replay refused")
    _loads_again(being.state)
    return "replayed" if applied else "nothing to replay"


def fuzz_journals(examples: int, directory: Path) -> Outcomes:
    settings_ = resolve({"state_dir": str(directory / "being")}, environ={})
    being = open_being(settings_)
    fresh = being.state.model_copy(deep=True)
    try:
        journals = SEEDS.map(hostile_journal)
        return _run(examples, journals, lambda value: replay_journal(being, fresh, value))
    finally:
        being.close()


# --- import documents --------------------------------------------------------------------


def check_import(state: AgentState, data: bytes) -> str:
    try:
        document = parse_import(data)
    except StateError as error:
        return refused(error)
    target = state.model_copy(deep=True)
    try:
        report = merge(target, document, "2026-01-02T03:04:05Z")
    except StateError as error:
        return refused(error, "merge refused")
    _loads_again(target)
    return "imported" if report.accepted else "not accepted"


def fuzz_imports(examples: int) -> Outcomes:
    state = parse_state(json.dumps(RICH_STATE).encode())
    return _run(examples, documents(VALID_IMPORT), lambda data: check_import(state, data))


# --- gateway responses -------------------------------------------------------------------

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "hello",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "t", "arguments": '{"a": 1}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
SCRUBBER = Scrubber(["sk-fuzz-canary-0123"])


def check_gateway_response(value: tuple[int, bytes]) -> str:
    status, body = value
    message = http_error_message(status, body)
    message.encode("utf-8")
    try:
        completion = parse_completion(body, SCRUBBER)
    except (JsonFailure, BramaError) as error:
        return refused(error)
    assistant: dict[str, Any] = {"role": "assistant", "content": completion.content}
    assistant["tool_calls"] = [call.wire() for call in completion.tool_calls]
    compact(assistant).encode("utf-8")  # strict: nothing unencodable got through
    return "completion"


def fuzz_gateway(examples: int) -> Outcomes:
    statuses = st.sampled_from([200, 400, 401, 429, 500, 503])
    return _run(examples, st.tuples(statuses, documents(COMPLETION)), check_gateway_response)


# --- MCP lines ---------------------------------------------------------------------------

MCP_RESULT = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {
        "content": [{"type": "text", "text": "done"}],
        "structuredContent": {"revenue_usd": "1.5", "items": [1, 2]},
        "isError": False,
    },
}
BOUNDARIES = (STRICT, OutputBoundary("redact"))


def check_mcp_line(line: bytes) -> str:
    message = parse_mcp_line(line.replace(b"\n", b" "), "fuzz", set())
    if message is None:
        return "dropped"
    result = getattr(message.message, "result", None)
    if not isinstance(result, dict):
        return "not a result"
    outcome = outcome_of(safe_json(result))
    for boundary in BOUNDARIES:  # strict: nothing unencodable reaches the model
        tool_message("c1", "fuzz__tool", outcome, boundary).message["content"].encode("utf-8")
    return "result"


def fuzz_mcp(examples: int) -> Outcomes:
    return _run(examples, documents(MCP_RESULT), check_mcp_line)


# --- configuration values ----------------------------------------------------------------

OPTIONS = list(ALL_OPTIONS)


def _option_text(rng: Random, option: Any) -> str:
    """A value for an option: its default, a plausible one, or hostile text."""
    roll = rng.random()
    if roll < 0.3 and option.default is not None:
        return str(option.default)
    if roll < 0.5:
        return rng.choice(("0", "1", "-1", "1.5", "true", "nan", "inf", "http://127.0.0.1:1/"))
    return hostile_text(rng)


def hostile_configuration(seed: int) -> tuple[dict[str, str], dict[str, str], dict[str, Any], bool]:
    """Flags, environment variables and TOML file values for random options."""
    rng = Random(seed)
    flags = {o.name: _option_text(rng, o) for o in rng.sample(OPTIONS, rng.randrange(4))}
    environ = {
        o.env: _option_text(rng, o).replace("\x00", "")
        for o in rng.sample(OPTIONS, rng.randrange(4))
        if o.env
    }
    file_values = {
        o.name: _option_text(rng, o) if rng.random() < 0.6 else hostile_value(rng)
        for o in rng.sample(OPTIONS, rng.randrange(4))
    }
    return flags, environ, file_values, rng.random() < 0.05


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)  # a TOML basic string, surrogates escaped
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    if value is None:
        return '""'
    return repr(value)


def check_configuration(directory: Path, value: tuple[Any, ...]) -> str:
    flags, environ, file_values, deep = value
    config = directory / "fuzz.toml"
    lines = [f"{name} = {_toml_value(item)}" for name, item in file_values.items()]
    if deep:
        lines.append("x = " + "[" * 600 + "]" * 600)
    config.write_text("\n".join(lines) + "\n", "utf-8", errors="surrogatepass")
    try:
        resolved = resolve(flags, config_file=str(config), environ=environ)
        check_stimulus(resolved)
        check_numbers(resolved)
        check_identity(resolved)
        check_url(resolved.brama_url, "BRAMA_BASE_URL")
        check_url(resolved.most_url, "MOST_BASE_URL")
    except ConfigurationError as error:
        return refused(error)
    return "resolved"


def fuzz_configuration(examples: int, directory: Path) -> Outcomes:
    configurations = SEEDS.map(hostile_configuration)
    return _run(examples, configurations, lambda value: check_configuration(directory, value))


# --- the import socket -------------------------------------------------------------------


def _request(document: bytes) -> bytes:
    encoded = base64.b64encode(document).decode("ascii")
    return compact({"version": 1, "operation": "mind_import", "document_base64": encoded}).encode()


SOCKET_REQUESTS = st.one_of(
    st.builds(_request, documents(VALID_IMPORT)),
    documents({"version": 1, "operation": "mind_import", "document_base64": "e30="}),
)


def check_socket_request(data: bytes) -> str:
    try:
        document = decode_request(data)
    except StateError as error:
        return refused(error)
    try:
        parse_import(document)
    except StateError as error:
        return refused(error, "document refused")
    return "accepted"


def fuzz_socket_requests(examples: int) -> Outcomes:
    return _run(examples, SOCKET_REQUESTS, check_socket_request)


def fuzz_socket(examples: int, directory: Path) -> Outcomes:
    """Real connections to a living being's socket: every request gets an answer."""
    outcomes: Outcomes = Counter()
    with ScriptedServer() as server:

        async def live() -> None:
            runtime = Runtime.boot(being_settings(directory, server))
            service = ImportService(socket_path(str(directory / "being")), runtime.apply_import)
            await service.start()

            def check(request: bytes) -> str:
                reply = ask(service.path, request)  # from a worker thread: the loop serves
                assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
                if not reply["ok"]:
                    assert isinstance(reply.get("error"), str) and reply["error"]
                return "imported" if reply["ok"] else "refused"

            try:
                found = await asyncio.to_thread(_run, examples, SOCKET_REQUESTS, check)
                outcomes.update(found)
            finally:
                await service.stop()
                await runtime.shutdown()

        asyncio.run(live())
    _loads_again(parse_state((directory / "being" / "state.json").read_bytes()))
    return outcomes


# --- the tiers ---------------------------------------------------------------------------

EXPECTED = {
    "state": ("loaded", "refused"),
    "journal": ("journal refused", "replay refused", "replayed"),
    "import": ("refused", "imported"),
    "gateway": ("refused", "completion"),
    "mcp": ("dropped", "result"),
    "configuration": ("refused", "resolved"),
    "socket request": ("refused", "document refused", "accepted"),
    "socket": ("refused", "imported"),
}


def _fuzz(target: str, examples: int, directory: Path) -> Outcomes:
    runners: dict[str, Callable[[], Outcomes]] = {
        "state": lambda: fuzz_state_files(examples),
        "journal": lambda: fuzz_journals(examples, directory),
        "import": lambda: fuzz_imports(examples),
        "gateway": lambda: fuzz_gateway(examples),
        "mcp": lambda: fuzz_mcp(examples),
        "configuration": lambda: fuzz_configuration(examples, directory),
        "socket request": lambda: fuzz_socket_requests(examples),
        "socket": lambda: fuzz_socket(examples, directory),
    }
    outcomes = runners[target]()
    assert outcomes["inputs"] >= examples, f"{target}: only {outcomes['inputs']} inputs ran"
    missing = [name for name in EXPECTED[target] if not outcomes[name]]
    assert missing == [], f"{target} never reached {missing}: {dict(outcomes)}"
    return outcomes


def test_the_default_tier_tries_five_thousand_inputs() -> None:
    assert sum(DEFAULT_INPUTS.values()) >= 5_000
    assert sum(DEFAULT_INPUTS.values()) * SLOW_FACTOR >= 100_000


@pytest.mark.parametrize("target", list(DEFAULT_INPUTS))
def test_fuzz(target: str, scratch: Path) -> None:
    _fuzz(target, DEFAULT_INPUTS[target], scratch)


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("target", list(DEFAULT_INPUTS))
def test_fuzz_long(target: str, scratch: Path) -> None:
    _fuzz(target, DEFAULT_INPUTS[target] * SLOW_FACTOR, scratch)


def test_mutations_reach_deep_places() -> None:
    """The mutator is not stuck at the top of a document."""
    depths = Counter(
        max(
            (len(path) for path in _differences(RICH_STATE, mutated(RICH_STATE, Random(seed)))),
            default=0,
        )
        for seed in range(300)
    )
    assert sum(count for depth, count in depths.items() if depth >= 4) >= 8, dict(depths)
    assert depths[3] >= 50, dict(depths)


def _differences(before: Any, after: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if type(before) is not type(after):
        yield path
    elif isinstance(before, dict):
        for key in set(before) | set(after):
            if key not in before or key not in after:
                yield (*path, key)
            else:
                yield from _differences(before[key], after[key], (*path, key))
    elif isinstance(before, list):
        if len(before) != len(after):
            yield path
        else:
            for index, (a, b) in enumerate(zip(before, after, strict=True)):
                yield from _differences(a, b, (*path, index))
    elif before != after:
        yield path
