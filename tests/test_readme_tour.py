"""The README's short tour, run as written, top to bottom, in a fresh directory.

The tour's two shell blocks are read from README.md: the first (the local model gateway,
`singularity brama serve`) is started and left running, as in a terminal of its own, and
the test waits until it answers, as a reader would; the second is run whole by `bash -e`
in a directory that holds nothing but the checkout's `.venv`, with no option variables
inherited: the documented defaults. The one change is the documented one for another
port (`--port N` for the gateway, `BRAMA_BASE_URL` for the being), so that the test never
depends on 8081 being free. A line put before the block marks where each command
starts on stdout and on stderr, so that each step is checked for what its comment in the
README says it does; a step added to the tour fails the test until it is checked too.

The local model is slow on two shared cores, so the default tier runs the being's block
against a scripted OpenAI-compatible gateway on loopback (one tool call, then plain
answers): every command of the tour, as written, in seconds. The first block, `brama
serve` with its defaults, is what `test_brama_default_model` starts, and there a being
lives a cycle on it. The slow tier runs the tour exactly, and again on the smallest model
the README offers (`--model smollm2-135m`) with one model round per cycle and short answers.
"""

from __future__ import annotations

import contextlib
import json
import re
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import clean_environment
from tests.support.living import terminate
from tests.support.polling import wait_for
from tests.support.ports import serve_on_free_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VENV = Path(sys.executable).parent.parent
REDUCED = {"SINGULARITY_MAX_TOOL_ROUNDS": "1", "BRAMA_MAX_TOKENS": "48"}
SMALLEST = "smollm2-135m"  # the README's other choice of `--model`


def tour_blocks() -> tuple[str, str]:
    """The gateway command and the being's script, as the README's tour shows them."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2, "the tour is a gateway block and a being block"
    gateway, being = blocks
    return gateway.split("#", 1)[0].strip(), being


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fresh directory standing for the checkout: only its `.venv`, as `make setup` left it."""
    (tmp_path / ".venv").symlink_to(VENV, target_is_directory=True)
    return tmp_path


@contextlib.contextmanager
def gateway(checkout: Path, *extra: str) -> Iterator[str]:
    """The tour's first block, started on a free port; its URL once it answers."""
    command = tour_blocks()[0]
    log = (checkout / "gateway.log").open("wb")
    server, port = serve_on_free_port(
        lambda port: subprocess.Popen(
            [*command.split(), "--port", str(port), *extra],
            cwd=checkout,
            env=clean_environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        ),
        "the gateway",
        timeout=300,
        log=checkout / "gateway.log",
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for(lambda: server.poll() is not None or _healthy(url), "the gateway", timeout=300)
        assert server.poll() is None, (checkout / "gateway.log").read_text()[-3000:]
        yield url
    finally:
        terminate(server)
        log.close()


# Each step of the being's block, as the README writes it, with what its comment promises.
STEPS = (
    "singularity doctor",
    "singularity once",
    'singularity say "What are you up to?"',
    "singularity run --resume --max-cycles 2",
    "singularity log",
    "singularity show",
    "singularity verify",
    "singularity tools --format table",
    "singularity import --file mind.json",
    "singularity children",
    "singularity sanctum wake",
    "singularity tools --skills skills.json --format table",
    "singularity run --resume --max-cycles 1 --skills skills.json",
)
# Put before the block: before each command, a line naming it on stdout and on stderr (fd 9
# is the script's stdout, so that a command substitution never captures the line).
MARK = "@step@ "
TRACE = r"""exec 9>&1
trap 'printf "\n@step@ %s\n" "$BASH_COMMAND" >&9; printf "\n@step@ %s\n" "$BASH_COMMAND" >&2' DEBUG
"""


def tour_steps(being: str) -> list[str]:
    """The block's `singularity` commands, without their comments."""
    return [
        re.sub(r"\s+#.*", "", line)
        for line in being.splitlines()
        if line.startswith("singularity ")
    ]


def by_step(stream: str) -> dict[str, str]:
    """What each `singularity` step wrote to one stream, by its command."""
    parts = re.split(rf"\n{MARK}(.*)\n", "\n" + stream)
    pairs = zip(parts[1::2], parts[2::2], strict=True)
    return {command: text.strip() for command, text in pairs if command.startswith("singularity ")}


def cycles_lived(live_view: str) -> list[int]:
    return [int(n) for n in re.findall(r"^─+ cycle (\d+) ─+$", live_view, flags=re.MULTILINE)]


def tool_names(table: str) -> list[str]:
    rows = [line.split("\t") for line in table.splitlines()]
    assert all(len(row) == 2 and row[1] for row in rows), table
    return [name for name, _ in rows]


def _take_the_tour(checkout: Path, gateway: str, extra: Mapping[str, str]) -> None:
    being = tour_blocks()[1]
    assert tour_steps(being) == list(STEPS), "the tour changed: say here what each new step shows"
    script = checkout / "tour.sh"
    script.write_text(TRACE + being, encoding="utf-8")
    result = subprocess.run(
        ["bash", "-e", str(script)],
        cwd=checkout,
        env=clean_environment(BRAMA_BASE_URL=gateway, **extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out, err = by_step(result.stdout), by_step(result.stderr)
    assert list(out) == list(STEPS) == list(err)  # every step ran, in order
    tour = checkout / "tour"
    state_dir = tour / ".singularity"

    # doctor: every check passed.
    assert json.loads(out[STEPS[0]]) == {
        "brama_model": "any",
        "las_tools": 0,
        "most": None,
        "ok": True,
    }
    # once: one cycle, its report on stdout.
    report = json.loads(out[STEPS[1]])
    assert report["cycle"] == 1 and report["status"] in ("completed", "tool_round_limit")
    assert cycles_lived(err[STEPS[1]]) == [1]
    # say: queued for the being's next cycle.
    assert json.loads(out[STEPS[2]])["route"] == "inbox"
    # run --resume --max-cycles 2: two more cycles, nothing but the live view and logs.
    assert out[STEPS[3]] == "" and cycles_lived(err[STEPS[3]]) == [2, 3]
    # log: the transcript of the three cycles, the message read at the start of cycle 2,
    # and what each round cost.
    transcript = out[STEPS[4]]
    heads = re.findall(r"^── cycle (\d+) · ", transcript, flags=re.MULTILINE)
    assert heads == ["1", "2", "3"], transcript[-3000:]
    second = transcript.split("── cycle 2 · ", 1)[1].split("── cycle 3 · ", 1)[0]
    assert "operator: What are you up to?" in second
    assert "· round cost " in transcript
    # show: who it is and where it stands.
    shown = out[STEPS[5]]
    assert shown.splitlines()[0].startswith("MyAgent (AGENT)")
    assert "status stopped, cycle 3" in shown and "\nbalance " in shown
    # verify: the state directory's invariants hold.
    assert out[STEPS[6]] == ".singularity: ok"
    # tools: every tool it can call (the built-ins, the sanctum's and the journal's).
    built_ins = tool_names(out[STEPS[7]])
    assert len(built_ins) == 24 and all(name.startswith("singularity_") for name in built_ins)
    # import: the memory is brought in.
    imported = json.loads(out[STEPS[8]])
    assert (imported["accepted"], imported["imported"], imported["rejected"]) == (True, 1, 0)
    # children: the family tree, rooted at the being.
    assert out[STEPS[9]].splitlines()[0] == ".singularity"
    # sanctum wake: what it reads when it wakes, identity files first.
    wake = out[STEPS[10]]
    assert wake.startswith("MODE: WAKING\nSanctum: ") and "\n===== PERSONA.md =====\n" in wake
    # tools --skills: the MCP server's tools first, then the same built-ins.
    assert tool_names(out[STEPS[11]]) == [
        "time__get_current_time",
        "time__convert_time",
        *built_ins,
    ]
    # run with the skills: one more cycle, with the server started for it (`tools` leaves a
    # server's stderr on the terminal; `run` gives it a log in the state directory).
    assert out[STEPS[12]] == "" and cycles_lived(err[STEPS[12]]) == [4]
    assert (state_dir / "logs" / "time.log").is_file()

    # What the tour leaves: the being's directory, the two files written, its workspace.
    assert sorted(p.name for p in tour.iterdir()) == [
        ".singularity",
        "mind.json",
        "skills.json",
        "workspace",
    ]
    assert stat.S_IMODE((tour / "workspace").stat().st_mode) == 0o700
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    state = json.loads((state_dir / "state.json").read_text())
    assert state["cycle"] == 4 and state["status"] == "stopped"
    assert "The user prefers tea." in [memory["text"] for memory in state["mind"]["memories"]]


@pytest.mark.timeout(1200)  # ~15 commands: seconds of CPU, minutes at a load of 15
def test_the_readme_tour_against_a_scripted_gateway(checkout: Path) -> None:
    note = {"path": "notes.md", "content": "First note."}
    with ScriptedServer([Turn.tool_call("singularity_file_write", note)]) as server:
        _take_the_tour(checkout, server.url, {})
        answered = len(server.completions)
    assert answered >= 4, answered  # a model round in each of the four cycles
    assert (checkout / "tour" / "workspace" / "notes.md").read_text() == "First note."


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_readme_tour_with_the_smallest_model(checkout: Path) -> None:
    with gateway(checkout, "--model", SMALLEST) as url:
        _take_the_tour(checkout, url, REDUCED)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_the_readme_tour_as_written(checkout: Path) -> None:
    with gateway(checkout) as url:
        _take_the_tour(checkout, url, {})
