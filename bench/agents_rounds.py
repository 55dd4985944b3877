"""The OpenAI Agents SDK side of `bench.rounds`: the same scripted rounds through its Runner.

Only this module imports the SDK; it needs the `bench` extra (`pip install -e '.[bench]'`).
The agent runs with its SQLite session (`SQLiteSession` on a file: WAL, SQLite's default
`synchronous=FULL`, every commit fsynced), which the Runner writes after every turn (the
model's answer and the outcomes of the tools it called), so each round is durable before
the next model call, as ours is. The model is the SDK's Chat Completions model
(`OpenAIChatCompletionsModel`) on an `AsyncOpenAI` client pointed at the scripted server
(`<url>v1`); tracing is off (it would export to a remote service).

What it mirrors of our runtime, so that both sides do the same work per round:

- the tool `singularity_memory_remember(kind, text)` stores a memory durably: one row in a
  table of the same SQLite file, committed (fsynced) before the tool returns;
- the instructions carry the prompt and the 20 newest memories, kept in memory;
- the input sent is trimmed to the newest ~8192 tokens (4 bytes a token), starting at a
  user message (`call_model_input_filter`), like our context selection; the whole session
  is still stored;
- a full being's session holds the same 400 messages / 1 MiB and its table the same 1000
  memories of 16 KiB.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.run_config import CallModelData, ModelInputData
from openai import AsyncOpenAI

from bench import full_conversation, full_memories

PROMPT_MEMORIES = 20
CONTEXT_BYTES = 8192 * 4
SYSTEM_PROMPT = "You are Bench, an autonomous digital being specialized in benchmarks."


def versions() -> dict[str, str]:
    """The versions of the packages this side runs on."""
    from importlib.metadata import version

    return {name: version(name) for name in ("openai-agents", "openai")}


def _trimmed(data: CallModelData[Any]) -> ModelInputData:
    """The newest input items within ~8192 tokens, from a user message on (the newest user
    message and what follows it when not even that fits)."""
    items = data.model_data.input
    start: int | None = None
    used = 0
    for index in range(len(items) - 1, -1, -1):
        used += len(json.dumps(items[index], ensure_ascii=False, default=str))
        if used > CONTEXT_BYTES:
            break
        if _is_user(items[index]):
            start = index
    if start is None:
        users = [index for index, item in enumerate(items) if _is_user(item)]
        start = users[-1] if users else 0
    return ModelInputData(input=items[start:], instructions=data.model_data.instructions)


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user"


class AgentsBeing:
    """An Agents SDK agent whose session and memories live in one SQLite file."""

    def __init__(self, directory: Path, base_url: str, kind: str) -> None:
        set_tracing_disabled(True)
        database = directory / "agents.sqlite"
        self.session = SQLiteSession("bench", database)
        self.memories = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        self.memories.execute("PRAGMA journal_mode=WAL")
        self.memories.execute(
            "CREATE TABLE IF NOT EXISTS memories (id TEXT PRIMARY KEY, kind TEXT, text TEXT)"
        )
        self.recent: collections.deque[str] = collections.deque(maxlen=PROMPT_MEMORIES)
        self.client = AsyncOpenAI(
            base_url=base_url.rstrip("/") + "/v1", api_key="scripted", max_retries=0, timeout=120
        )
        self.agent = Agent(
            name="Bench",
            instructions=self._instructions,
            tools=[self._remember_tool()],
            model=OpenAIChatCompletionsModel(model="scripted-model", openai_client=self.client),
            model_settings=ModelSettings(temperature=0.2, max_tokens=2048),
        )
        self.config = RunConfig(call_model_input_filter=_trimmed, tracing_disabled=True)
        self.kind = kind

    def _remember_tool(self) -> Any:
        connection, recent = self.memories, self.recent

        @function_tool(name_override="singularity_memory_remember")
        def remember(kind: str, text: str) -> str:
            """Persist a memory owned by this digital being."""
            memory_id = str(uuid.uuid4())
            connection.execute(
                "INSERT INTO memories (id, kind, text) VALUES (?, ?, ?)", (memory_id, kind, text)
            )
            recent.append(f"{kind}: {text}")
            return json.dumps({"content": {"memory_id": memory_id}, "status": "success"})

        return remember

    def _instructions(self, context: Any, agent: Any) -> str:
        text = SYSTEM_PROMPT
        if self.recent:
            text += "\n\nRecent persistent memories:\n- " + "\n- ".join(reversed(self.recent))
        return text

    async def fill(self) -> None:
        """A full being: 1000 memories of 16 KiB in the table, 400 messages (1 MiB) in the
        session; nothing for a fresh one."""
        if self.kind != "full":
            return
        with self.memories:
            self.memories.execute("BEGIN")
            for memory in full_memories():
                self.memories.execute(
                    "INSERT INTO memories (id, kind, text) VALUES (?, ?, ?)",
                    (memory.id, memory.kind, memory.text),
                )
                self.recent.append(f"{memory.kind}: {memory.text}")
        items: list[Any] = [
            {"role": str(m["role"]), "content": str(m["content"])} for m in full_conversation()
        ]
        await self.session.add_items(items)

    async def live(self, opening: str, rounds: int) -> float:
        """Run the agent from one user message until it answers in text: the seconds taken."""
        started = time.perf_counter()
        result = await Runner.run(
            self.agent,
            opening,
            session=self.session,
            run_config=self.config,
            max_turns=rounds + 2,
        )
        elapsed = time.perf_counter() - started
        if result.final_output != "done":
            raise RuntimeError(f"the agent did not live the scenario: {result.final_output!r}")
        return elapsed

    def sqlite_settings(self) -> dict[str, Any]:
        """The journal mode and synchronous level the session's connection runs with."""
        connection = self.session._get_connection()
        journal = connection.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = connection.execute("PRAGMA synchronous").fetchone()[0]
        return {"journal_mode": journal, "synchronous": synchronous}

    async def close(self) -> None:
        await self.client.close()
        self.session.close()
        self.memories.close()
