"""The official `openai` client against `singularity brama serve`, as any program would use it.

A real gateway process serves the smallest real model (SmolLM2-135M, so that each answer
takes seconds) behind a bearer key: the model list, a chat, tool calls, streamed text and
streamed calls, JSON answers (`response_format`), and the errors' shapes, all read by
the client's own types.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.brama import ASK, REMEMBER, brama_serve

KEY = "sk-local-test-key"
MODEL_ID = "local/smollm2-135m-instruct"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`brama serve --model smollm2-135m --api-key-file ...` on a free port: its base URL."""
    folder = tmp_path_factory.mktemp("brama-openai")
    key = folder / "api.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    flags = ("--model", "smollm2-135m", "--api-key-file", str(key))
    bearer = {"authorization": f"Bearer {KEY}"}
    with brama_serve(folder / "brama.log", *flags, ready="v1/models", headers=bearer) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway + "v1", api_key=KEY, max_retries=0, timeout=600)


def test_models_and_a_plain_chat(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL_ID]
    chat = client.chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": "Say hello in one word."}],
        max_tokens=12,
        temperature=0,
    )
    choice = chat.choices[0]
    assert chat.model == MODEL_ID and chat.object == "chat.completion"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert chat.usage is not None and chat.usage.completion_tokens > 0


def test_tool_calls_are_parsed_by_the_client(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model=MODEL_ID, messages=ASK, tools=[REMEMBER], tool_choice="required", max_tokens=64
    )
    choice = chat.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "remember"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert set(arguments) == {"kind", "text"}
    assert all(isinstance(value, str) and value for value in arguments.values())


def test_streamed_text_arrives_in_chunks_and_ends_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": "Count from one to five in words."}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) > 1  # streamed as it was decoded, not in one piece
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length") and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


def test_a_streamed_tool_call_is_assembled_by_the_client(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="any",
        messages=ASK,
        tools=[REMEMBER],
        tool_choice={"type": "function", "function": {"name": "remember"}},
        max_tokens=64,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        for part in delta.tool_calls or []:
            entry = calls.setdefault(part.index, {"name": "", "arguments": ""})
            entry["name"] += (part.function and part.function.name) or ""
            entry["arguments"] += (part.function and part.function.arguments) or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [call["name"] for call in calls.values()] == ["remember"]
    assert set(json.loads(calls[0]["arguments"])) == {"kind", "text"}


def test_json_answers_follow_response_format(client: openai.OpenAI) -> None:
    question: Any = [{"role": "user", "content": "What colour is the sea? Answer in JSON."}]
    loose = client.chat.completions.create(
        model="any", messages=question, max_tokens=48, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(loose.choices[0].message.content or ""), dict)
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["blue", "green", "grey"]}},
        "required": ["colour"],
        "additionalProperties": False,
    }
    strict = client.chat.completions.create(
        model="any",
        messages=question,
        max_tokens=48,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "colour", "schema": schema, "strict": True},
        },
    )
    assert json.loads(strict.choices[0].message.content or "")["colour"] in {
        "blue",
        "green",
        "grey",
    }


def test_errors_reach_the_client_as_its_own_exceptions(gateway: str, client: openai.OpenAI) -> None:
    stranger = openai.OpenAI(base_url=gateway + "v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        stranger.chat.completions.create(model="any", messages=ASK)
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model="any", messages=ASK, stream=True)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-9", messages=ASK)
    assert missing.value.code == "model_not_found"
    assert "the model gpt-9 does not exist" in missing.value.message
    with pytest.raises(openai.BadRequestError) as mixed:
        client.chat.completions.create(
            model="any", messages=ASK, tools=[REMEMBER], response_format={"type": "json_object"}
        )
    assert mixed.value.code == "unsupported_response_format"
    with pytest.raises(openai.BadRequestError) as unusable:
        client.chat.completions.create(
            model="any",
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object", "$ref": "#/nowhere"}},
            },
        )
    assert unusable.value.code == "invalid_response_format"
    with pytest.raises(openai.BadRequestError, match="max_tokens must be a positive integer"):
        client.chat.completions.create(model="any", messages=ASK, max_tokens=0)
