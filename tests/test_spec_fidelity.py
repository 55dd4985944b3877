"""Contracts another implementation of the spec, or a user reading the docs, relies on.

- Both credentials (decision 5): with a Brama secret and an API key configured, every
  completion carries the four HMAC headers of §9.2 and `Authorization: Bearer <key>`.
- `verify` accepts any valid being-v1 directory: a negative `remaining`, which the
  original allows (§8.2), is a warning and exits 0.
- Bounds (§3.1, §6.2): `--max-tokens` is an unsigned 32-bit number; the initial prompt
  substitutes `<name>` and `<specialty>` as given, in one pass.

Expected values are written out; the gateway is the scripted server over real HTTP.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import Result, cli_args

SECRET = "s3cret-hmac"
API_KEY = "sk-test-0123"


def test_a_secret_and_an_api_key_both_authenticate_every_completion(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    secret_file = tmp_path / "hmac.secret"
    secret_file.write_text(SECRET + "\n")
    os.chmod(secret_file, 0o600)
    server = ScriptedServer(
        [Turn.text("signed and keyed")], hmac_secret=SECRET, agent_id="local", bearer_token=API_KEY
    )
    with server:
        args = cli_args(tmp_path, server, "--brama-secret-file", str(secret_file))
        result = cli("once", *args, BRAMA_API_KEY=API_KEY)
        [request] = server.completions
    assert result.code == 0, result.err
    headers = request.headers
    digest = hashlib.sha256(request.body).hexdigest()
    message = f"local:{headers['x-agent-timestamp']}:{digest}".encode()
    assert headers["authorization"] == "Bearer sk-test-0123"
    assert headers["x-agent-id"] == "local"
    assert headers["x-agent-body-sha256"] == digest
    assert headers["x-agent-signature"] == (
        hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    )
    assert headers["content-type"] == "application/json"


NEGATIVE = """{
  "schema_version": "being-v1",
  "identity": {
    "agent_id": "a1", "name": "Ada", "ticker": "ADA", "agent_type": "general",
    "specialty": "math", "role": "being", "environment": "local", "host": "localhost",
    "workload_id": "w", "workload_public_key": "ZEROS", "executable_digest": "ZEROS",
    "code_digest": "ZEROS", "policy_digest": "ZEROS", "policy_sequence": 0
  },
  "mind": {"system_prompt": "You are Ada.", "rules": [], "learnings": [], "memories": [],
           "children": [], "current_model": "any"},
  "status": "exhausted",
  "cycle": 4,
  "budget": {"starting": "1", "remaining": "-0.25", "api_spent": "1.25",
             "instance_spent": "0", "total_tokens": 50, "earned": "0"},
  "conversation": [{"role": "user", "content": "hi"}],
  "recent_actions": [],
  "created_resources": {"chat_ids": [], "message_ids": []},
  "started_at": "2026-01-01T00:00:00Z",
  "updated_at": "2026-01-01T00:00:00Z"
}
""".replace("ZEROS", "0" * 64)


def test_verify_warns_about_a_negative_balance_the_original_wrote(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = tmp_path / "original"
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    (path / "state.json").write_text(NEGATIVE)
    os.chmod(path / "state.json", 0o600)
    result = cli("verify", str(path))
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        f"{path}: warning: budget.remaining is -0.25: the being spent more than it had (the "
        "original runtime has no debt limit); it stays exhausted until credited\n"
        f"{path}: ok\n"
    )


def test_verify_still_refuses_a_balance_that_does_not_add_up(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = tmp_path / "original"
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    (path / "state.json").write_text(NEGATIVE.replace('"-0.25"', '"-0.5"'))
    os.chmod(path / "state.json", 0o600)
    result = cli("verify", str(path))
    assert result.code == 4
    assert result.out.splitlines()[-1] == (
        f"{path}: budget.remaining is -0.5 but starting + earned - spent - children funded is -0.25"
    )


@pytest.mark.parametrize("value", ["4294967296", "18446744073709551615", "-1"])
def test_max_tokens_is_an_unsigned_32_bit_number(
    tmp_path: Path, cli: Callable[..., Result], value: str
) -> None:
    result = cli("once", "--max-tokens", value)
    assert (result.code, result.out, result.err) == (
        2,
        "",
        "singularity: configuration: --max-tokens must be an integer from 0 to 4294967295\n",
    )
    assert not (tmp_path / ".singularity").exists()


def test_the_largest_max_tokens_reaches_the_gateway(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("ok")]) as server:
        result = cli("once", *cli_args(tmp_path, server, "--max-tokens", "4294967295"))
        body = server.completions[0].json
    assert result.code == 0, result.err
    assert body["max_tokens"] == 4294967295


def test_the_initial_prompt_takes_name_and_specialty_as_given(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("ok")]) as server:
        args = cli_args(
            tmp_path, server, "--agent-name", "Ada {specialty}", "--specialty", "{name}"
        )
        result = cli("once", *args)
        system = server.completions[0].json["messages"][0]["content"]
    assert result.code == 0, result.err
    assert system.startswith(
        "You are Ada {specialty}, an autonomous digital being specialized in {name}. You are "
        "not waiting for an assignment; you choose what to pursue."
    )
    state = json.loads((tmp_path / "being" / "state.json").read_text("utf-8"))
    assert state["mind"]["system_prompt"].startswith("You are Ada {specialty}, an autonomous")
