"""The embedded gateway's config file, selector resolution and upstream routing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from singularity.errors import ConfigurationError, SecretFileError
from singularity.gateway.auth import Auth
from singularity.gateway.client import BramaClient
from singularity.gateway_server.routes import (
    LOCAL_MODEL_ID,
    GatewayConfig,
    LocalSettings,
    Router,
    UnknownModel,
    load_config,
)
from singularity.gateway_server.server import Gateway, create_app
from singularity.testing.scripted_server import ScriptedServer, Turn
from singularity.tools.base import ToolDefinition

UPSTREAM_CONFIG = """
[gateway]
queue_size = 2

[local]
n_ctx = 2048
max_tokens = 64

[selectors]
best = "big/large"
"task:code" = "big/coder"
"task:*" = "big/large"

[[upstream]]
name = "big"
base_url = "{url}"
key_file = "{key}"
models = ["large", "coder", "eyes"]
vision = ["eyes"]
timeout_secs = 5
"""


def _key(tmp_path: Path, mode: int = 0o600) -> Path:
    key = tmp_path / "upstream.key"
    key.write_text("sk-test-123\n")
    key.chmod(mode)
    return key


def _config(
    tmp_path: Path, url: str = "http://127.0.0.1:9/v1", text: str = UPSTREAM_CONFIG
) -> Path:
    path = tmp_path / "brama.toml"
    path.write_text(text.format(url=url, key=_key(tmp_path)))
    return path


def test_defaults_serve_the_local_model_for_every_selector() -> None:
    router = Router(load_config(None))
    assert router.model_ids == [LOCAL_MODEL_ID]
    for selector in ("any", "any-vision-capable", "best", "task:anything", LOCAL_MODEL_ID):
        route = router.resolve(selector)
        assert (route.id, route.upstream) == (LOCAL_MODEL_ID, None)
    for unknown in ("gpt-4o", "local", "task", "anyway", ""):
        with pytest.raises(UnknownModel):
            router.resolve(unknown)


def test_config_file_adds_upstream_routes_and_selectors(tmp_path: Path) -> None:
    config = load_config(str(_config(tmp_path)))
    assert config.queue_size == 2
    assert (config.local.n_ctx, config.local.max_tokens) == (2048, 64)
    assert config.local.threads == LocalSettings().threads >= 1
    router = Router(config)
    assert router.model_ids == [LOCAL_MODEL_ID, "big/large", "big/coder", "big/eyes"]
    resolved = {
        selector: router.resolve(selector).id
        for selector in ("any", "best", "task:code", "task:write", "any-vision-capable")
    }
    assert resolved == {
        "any": LOCAL_MODEL_ID,
        "best": "big/large",
        "task:code": "big/coder",
        "task:write": "big/large",
        "any-vision-capable": "big/eyes",
    }
    route = router.resolve("big/coder")
    assert route.model == "coder"
    assert route.upstream is not None and route.upstream.key is not None
    assert route.upstream.key.reveal() == "sk-test-123"
    assert route.upstream.completions_url == "http://127.0.0.1:9/v1/chat/completions"


def test_default_model_and_a_gateway_without_local_model(tmp_path: Path) -> None:
    text = UPSTREAM_CONFIG.replace("n_ctx = 2048", "enabled = false").replace(
        "[gateway]", '[gateway]\ndefault_model = "big/coder"'
    )
    router = Router(load_config(str(_config(tmp_path, text=text))))
    assert LOCAL_MODEL_ID not in router.model_ids
    assert router.resolve("any").id == "big/coder"
    with pytest.raises(UnknownModel):
        router.resolve(LOCAL_MODEL_ID)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[gateway]", "[gatway]"), "unknown table: gatway"),
        (("n_ctx = 2048", "n_ctx = -1"), "local.n_ctx must be positive"),
        (("n_ctx = 2048", 'n_ctx = "big"'), "local.n_ctx must be an integer"),
        (("n_ctx = 2048", "ctx = 2048"), "unknown key in [local]: ctx"),
        (('best = "big/large"', 'best = "big/huge"'), "selector best names unknown model big/huge"),
        (('best = "big/large"', 'fastest = "big/large"'), "fastest is not a selector"),
        (('vision = ["eyes"]', 'vision = ["ears"]'), "vision must list some of its models"),
        (('"coder", "eyes"', '"large", "eyes"'), "model id big/large is listed twice"),
        (('name = "big"', 'name = "a/b"'), "needs a name (no '/')"),
        (("base_url = ", "base = "), "unknown key in upstream[0]: base"),
        (("queue_size = 2", "queue_size = true"), "gateway.queue_size must be an integer"),
    ],
)
def test_config_errors_are_explained(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = _config(tmp_path, text=UPSTREAM_CONFIG.replace(*edit))
    with pytest.raises(ConfigurationError) as caught:
        load_config(str(path))
    assert message in str(caught.value)


def test_config_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read brama config"):
        load_config(str(tmp_path / "absent.toml"))
    broken = tmp_path / "broken.toml"
    broken.write_text("[local\n")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_config(str(broken))
    with pytest.raises(ConfigurationError, match="no model to serve"):
        Router(GatewayConfig(local=LocalSettings(enabled=False)))


def test_key_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "brama.toml"
    path.write_text(UPSTREAM_CONFIG.format(url="http://x/v1", key=_key(tmp_path, 0o644)))
    with pytest.raises(SecretFileError, match="must not be group/world accessible"):
        load_config(str(path))


def _upstream_only(tmp_path: Path, url: str) -> Router:
    text = UPSTREAM_CONFIG.replace("n_ctx = 2048", "enabled = false")
    return Router(load_config(str(_config(tmp_path, url=url, text=text))))


def test_completions_are_forwarded_to_the_upstream(tmp_path: Path) -> None:
    tool = ToolDefinition("note", "Write a note", {"type": "object", "properties": {}})

    async def scenario(server: ScriptedServer) -> tuple[str, str, list[str]]:
        gateway = Gateway(
            _upstream_only(tmp_path, server.url + "v1/"), None, http=httpx.AsyncClient()
        )
        transport = httpx.ASGITransport(app=create_app(gateway))
        async with BramaClient(
            "http://brama/", agent_id="a", auth=Auth.none(), transport=transport
        ) as client:
            first = await client.complete("task:code", [{"role": "user", "content": "hi"}], [tool])
            second = await client.complete("best", [{"role": "user", "content": "go"}], [tool])
            models = await client.models()
        await gateway.http.aclose()  # type: ignore[union-attr]
        return first.tool_calls[0].name, second.content, models

    with ScriptedServer([Turn.tool_call("note", {"text": "x"}), Turn.text("done")]) as server:
        name, content, models = asyncio.run(scenario(server))
        sent = server.completions
    assert (name, content) == ("note", "done")
    assert models == ["big/large", "big/coder", "big/eyes"]
    assert [r.json["model"] for r in sent] == ["coder", "large"]
    assert all(r.headers["authorization"] == "Bearer sk-test-123" for r in sent)
    assert sent[0].json["tools"][0]["function"]["name"] == "note"
    assert sent[0].path == "/v1/chat/completions"


def test_upstream_errors_pass_through_and_failures_are_502(tmp_path: Path) -> None:
    async def post(url: str) -> httpx.Response:
        gateway = Gateway(_upstream_only(tmp_path, url), None, http=httpx.AsyncClient())
        transport = httpx.ASGITransport(app=create_app(gateway))
        async with httpx.AsyncClient(transport=transport, base_url="http://brama") as http:
            body = {"model": "big/large", "messages": [{"role": "user", "content": "hi"}]}
            response = await http.post("/v1/chat/completions", json=body)
        await gateway.http.aclose()  # type: ignore[union-attr]
        return response

    with ScriptedServer([Turn.error(429, "slow down"), Turn.raw("<html>")]) as server:
        limited = asyncio.run(post(server.url + "v1"))
        garbled = asyncio.run(post(server.url + "v1"))
    assert (limited.status_code, limited.json()["error"]["message"]) == (429, "slow down")
    assert garbled.status_code == 502
    assert garbled.json()["error"]["message"] == "upstream big answered 200 without JSON"
    # A port nothing listens on (ours, just closed): the gateway answers 502 itself.
    with ScriptedServer() as server:
        closed = server.url
    unreachable = asyncio.run(post(closed + "v1"))
    assert unreachable.status_code == 502
    assert unreachable.json()["error"]["type"] == "upstream_error"
    assert "upstream big failed" in unreachable.json()["error"]["message"]


def test_key_file_path_expands_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _key(tmp_path)
    text = UPSTREAM_CONFIG.format(url="http://x/v1", key="~/upstream.key")
    path = tmp_path / "brama.toml"
    path.write_text(text)
    route = Router(load_config(str(path))).resolve("best")
    assert route.upstream is not None and route.upstream.key is not None
    assert route.upstream.key.reveal() == "sk-test-123"
