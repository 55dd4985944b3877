"""The LangGraph side of `bench.rounds`: the same scripted rounds through LangGraph's agent.

Only this module imports LangGraph; it needs the `bench` extra
(`pip install -e '.[bench]'`). The agent is LangGraph's prebuilt tool-calling agent
(`langgraph.prebuilt.create_react_agent`) with its SQLite checkpointer (`SqliteSaver`, WAL,
SQLite's default `synchronous=FULL`, so every commit is fsynced) and, for the memories, its
SQLite store (`SqliteStore`) on the same database file. The model is langchain-openai's
`ChatOpenAI` pointed at the scripted server (`<url>v1`).

What it mirrors of our runtime, so that both sides do the same work per round:

- the tool `singularity_memory_remember(kind, text)` stores a memory durably (a store row);
- the system message carries the prompt and the 20 newest memories, kept in memory;
- the conversation sent is trimmed to the newest ~8192 tokens (4 bytes a token), starting at
  a user message, like our context selection; the whole thread is still checkpointed;
- a full thread holds the same 400 messages / 1 MiB and the store the same 1000 memories
  of 16 KiB.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import json
import sqlite3
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import create_react_agent
from langgraph.store.sqlite import SqliteStore

from bench import full_conversation, full_memories

PROMPT_MEMORIES = 20
CONTEXT_TOKENS = 8192
SYSTEM_PROMPT = "You are Bench, an autonomous digital being specialized in benchmarks."
MEMORIES = ("memories",)


@contextlib.contextmanager
def timing_sdk_preparation() -> Iterator[list[float]]:
    """Seconds spent in the OpenAI SDK's request preparation while inside (`[nan]` when its
    `maybe_transform` cannot be found): it walks every message of a request through type
    introspection, and the figures show it is most of LangGraph's side of a round."""
    spent = [0.0]
    module = importlib.import_module("openai.resources.chat.completions.completions")
    original = getattr(module, "maybe_transform", None)
    if original is None:
        yield [float("nan")]
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    setattr(module, "maybe_transform", timed)  # noqa: B010 (a module attribute mypy cannot see)
    try:
        yield spent
    finally:
        setattr(module, "maybe_transform", original)  # noqa: B010


def versions() -> dict[str, str]:
    """The versions of the packages this side runs on."""
    from importlib.metadata import version

    names = (
        "langgraph",
        "langgraph-prebuilt",
        "langgraph-checkpoint-sqlite",
        "langchain-core",
        "langchain-openai",
        "openai",
    )
    return {name: version(name) for name in names}


class LangGraphBeing:
    """A LangGraph agent whose thread and memories live in one SQLite file."""

    def __init__(self, directory: Path, base_url: str, kind: str, durability: str) -> None:
        database = str(directory / "langgraph.sqlite")
        self.checkpoints = sqlite3.connect(database, check_same_thread=False)
        self.saver = SqliteSaver(self.checkpoints)
        self.saver.setup()
        self.store_connection = sqlite3.connect(
            database, check_same_thread=False, isolation_level=None
        )
        self.store = SqliteStore(self.store_connection)
        self.store.setup()
        self.recent: collections.deque[str] = collections.deque(maxlen=PROMPT_MEMORIES)
        if durability not in ("sync", "async", "exit"):
            raise ValueError(f"unknown LangGraph durability {durability!r}")
        self.durability: Literal["sync", "async", "exit"] = durability  # type: ignore[assignment]
        self.config = RunnableConfig(configurable={"thread_id": "bench"}, recursion_limit=100_000)
        model = ChatOpenAI(
            model="scripted-model",
            base_url=base_url.rstrip("/") + "/v1",
            api_key="scripted",  # type: ignore[arg-type]
            max_retries=0,
            temperature=0.2,
            max_tokens=2048,  # type: ignore[call-arg]
            timeout=120,
        )
        with warnings.catch_warnings():
            # Deprecated since LangGraph 1.0 for langchain's `create_agent`, which builds the
            # same model/tools graph on the same engine; this one needs no other package.
            warnings.simplefilter("ignore")
            self.graph = create_react_agent(
                model,
                [self._remember_tool()],
                prompt=self._prompt,
                pre_model_hook=self._trim,
                checkpointer=self.saver,
            )
        if kind == "full":
            self._fill()

    def _remember_tool(self) -> Any:
        store, recent = self.store, self.recent

        @tool("singularity_memory_remember")
        def remember(kind: str, text: str) -> str:
            """Persist a memory owned by this digital being."""
            memory_id = str(uuid.uuid4())
            store.put(MEMORIES, memory_id, {"kind": kind, "text": text})
            recent.append(f"{kind}: {text}")
            return json.dumps({"content": {"memory_id": memory_id}, "status": "success"})

        return remember

    def _prompt(self, state: dict[str, Any]) -> list[BaseMessage]:
        text = SYSTEM_PROMPT
        if self.recent:
            text += "\n\nRecent persistent memories:\n- " + "\n- ".join(reversed(self.recent))
        return [SystemMessage(text), *state["messages"]]

    def _trim(self, state: dict[str, Any]) -> dict[str, Any]:
        trimmed = trim_messages(
            state["messages"],
            max_tokens=CONTEXT_TOKENS,
            token_counter=count_tokens_approximately,
            strategy="last",
            start_on="human",
            include_system=False,
        )
        return {"llm_input_messages": trimmed}

    def _fill(self) -> None:
        """1000 memories of 16 KiB in the store; 400 messages (1 MiB) in the thread."""
        for memory in full_memories():
            self.store.put(MEMORIES, memory.id, {"kind": memory.kind, "text": memory.text})
            self.recent.append(f"{memory.kind}: {memory.text}")
        messages: list[AnyMessage] = [
            HumanMessage(str(m["content"])) if m["role"] == "user" else AIMessage(str(m["content"]))
            for m in full_conversation()
        ]
        self.graph.update_state(self.config, {"messages": messages})

    def live(self, opening: str) -> tuple[float, float]:
        """Run the agent from one user message until it answers in text: the seconds taken,
        and the seconds of it spent preparing requests in the OpenAI SDK."""
        with timing_sdk_preparation() as preparing:
            started = time.perf_counter()
            self.graph.invoke(
                {"messages": [HumanMessage(opening)]}, self.config, durability=self.durability
            )
            elapsed = time.perf_counter() - started
        return elapsed, preparing[0]

    def sqlite_settings(self) -> dict[str, Any]:
        """The journal mode and synchronous level the checkpointer's connection runs with."""
        journal = self.checkpoints.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = self.checkpoints.execute("PRAGMA synchronous").fetchone()[0]
        return {"journal_mode": journal, "synchronous": synchronous}

    def close(self) -> None:
        self.checkpoints.close()
        self.store_connection.close()
