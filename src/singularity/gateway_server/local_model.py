"""The in-process model of the embedded gateway: a ChatML GGUF through llama.cpp.

The prompt is rendered by `chat_prompt`. How an answer is decoded is decided per request
(`choose_mode`):

- `response_format` `json_object` or `json_schema`: an answer under that schema's grammar;
- `tool_choice` `none`, or no tools: a plain answer (a grammar keeps it from opening
  with JSON, which nobody would run);
- `required`, or a named function: a call, grammar-constrained to the offered schemas;
- `auto` or absent (what a being sends), by the `tool_calls` setting:
  - `hybrid` (the default): the model writes freely; a call in any form it uses
    (`tool_parse`) becomes `tool_calls`, anything else is the answer, and a call that
    does not parse or fit its schema is decoded again under the grammar of the tool it
    named, so no invalid call ever leaves the gateway; an empty answer, or a call that
    fails twice, becomes a plain answer decoded under the text grammar (never empty);
  - `free`: the same without the second decoding (a broken call is returned as text);
  - `grammar`: a constrained call when the last message is a `user` or `system`
    message, such as a cycle's framing, and a plain answer after a tool result (for
    a model too small to choose by itself, such as SmolLM2-135M).

A constrained call is `{"name": <tool>, "arguments": <its parameters>}` after an opening
`<tool_call>` tag, under a grammar built from the tool schemas bounded so that the longest
call fits `max_tokens` (`tool_grammar`). Generation stops at `max_tokens`, the context
window or a wall-clock deadline. llama.cpp keeps the evaluated prompt and reuses its
longest common prefix with the next one, so the tools and the system prompt are evaluated
once. The model is loaded once; `complete` calls are serialized.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from singularity.gateway_server import chat_prompt
from singularity.gateway_server.chat_prompt import CALL_OPEN, END
from singularity.gateway_server.model_catalogue import MODELS
from singularity.gateway_server.model_files import (
    INSTALL_HINT,
    MissingExtra,
    default_model_dir,
    locate,
)
from singularity.gateway_server.prompt_store import (
    SAVE_MIN,
    PromptStore,
    default_prompt_dir,
    shared,
)
from singularity.gateway_server.routes import LocalSettings
from singularity.gateway_server.tool_grammar import ToolSpec, call_grammar, parse_call, text_grammar
from singularity.gateway_server.tool_parse import find_calls
from singularity.jsoncodec import compact

# A small model otherwise tends to loop ("0000…") inside a string until the cap.
REPEAT_PENALTY: Final = 1.1
# Old turns are dropped this many at a time, so the kept prefix (and its cache) stays put.
TRIM_STEP: Final = 8
Mode = Literal["text", "call", "free", "json"]


class ContextOverflow(ValueError):
    """Even the system message and the last message do not fit the context window."""


class UnusableSchema(ValueError):
    """A `response_format` schema that no grammar can express."""


@dataclass(frozen=True)
class ChatRequest:
    """A validated completion request for the local model."""

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[ToolSpec] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float = 0.2
    # The JSON schema a plain answer must satisfy (`response_format`), if any.
    response_format: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ChatResult:
    """The model's answer and its token usage."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Generated:
    """One decoding: its text, why it ended, and how many tokens it took."""

    text: str
    finish: str
    tokens: int


def model_path(settings: LocalSettings) -> Path:
    """The verified GGUF to load: the configured path, or the chosen model's file."""
    if settings.model_path:
        return Path(settings.model_path)
    directory = Path(settings.model_dir) if settings.model_dir else default_model_dir()
    return locate(MODELS[settings.model], directory)


def store_key(settings: LocalSettings, path: Path, version: str) -> str:
    """What a saved context must match: the model file, the context size, llama.cpp."""
    if settings.model_path:
        facts = path.resolve().stat()
        identity = f"{path.resolve()}:{facts.st_size}:{facts.st_mtime_ns}"
    else:
        identity = MODELS[settings.model].sha256
    return hashlib.sha256(f"{identity}:{settings.n_ctx}:{version}".encode()).hexdigest()[:24]


def choose_mode(request: ChatRequest, tool_calls: str = "hybrid") -> tuple[Mode, list[ToolSpec]]:
    """How to decode (see the module docstring) and the tools a call may use."""
    choice, tools = request.tool_choice, list(request.tools)
    if request.response_format is not None:
        return "json", []
    if not tools or choice == "none":
        return "text", []
    if isinstance(choice, Mapping):
        name = choice.get("function", {}).get("name")
        # The server refuses a name that was not offered; all tools is the safe fallback.
        return "call", [tool for tool in tools if tool.name == name] or tools
    if choice == "required":
        return "call", tools
    if tool_calls != "grammar":
        return "free", tools
    last = request.messages[-1].get("role") if request.messages else None
    return ("call", tools) if last in ("user", "system", "developer") else ("text", [])


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
        self._store: PromptStore | None = None
        if settings.prompt_cache_dir != "":
            directory = Path(settings.prompt_cache_dir or default_prompt_dir())
            version = str(getattr(self._cpp, "__version__", "unknown"))
            key = store_key(settings, self.path, version)
            self._store = PromptStore(self._cpp, directory, key)

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

    def schema_grammar(self, schema: Mapping[str, Any]) -> Any:
        """The grammar of a JSON answer under `schema`, or `UnusableSchema`."""
        try:
            source = self._cpp.llama_grammar.json_schema_to_gbnf(compact(dict(schema)))
            return self._cpp.LlamaGrammar.from_string(source, verbose=False)
        except Exception as error:  # the converter raises bare exceptions of several kinds
            raise UnusableSchema(f"the response schema cannot be used: {error}") from None

    def prompt(self, request: ChatRequest, room: int) -> list[int]:
        """The prompt's tokens, dropping old turns (in steps) until `room` tokens are left.

        A call's tool results go with it: the kept conversation never opens with a result
        whose call was dropped.
        """
        system = chat_prompt.system_text(request.messages, request.tools)
        turns = chat_prompt.render_turns(request.messages)
        cuts = [0, *(index for index, turn in enumerate(turns) if index and not turn.result)]
        budget, dropped = self.settings.n_ctx - room, 0
        while True:
            tokens = self.tokens(chat_prompt.render_prompt(system, turns[dropped:]))
            if len(tokens) <= budget:
                return tokens
            if dropped >= cuts[-1]:
                raise ContextOverflow(
                    f"the prompt needs {len(tokens)} tokens; the context window holds "
                    f"{self.settings.n_ctx} including {room} for the answer"
                )
            guess = (len(turns) - dropped) * (len(tokens) - budget) // len(tokens)
            wanted = min(dropped + TRIM_STEP * (1 + guess // TRIM_STEP), cuts[-1])
            dropped = next(cut for cut in cuts if cut >= wanted)

    def close(self) -> None:
        """Stop the generation in progress, if any, at its next token (for shutdown)."""
        self._closing.set()

    def complete(
        self, request: ChatRequest, on_text: Callable[[str], None] | None = None
    ) -> ChatResult:
        """Answer one request (blocking; see the module docstring for the decoding policy).

        `on_text` receives the text of a plain or free answer as it is decoded.
        """
        with self._lock:
            tokens = self.prompt(request, self._limit(request))
            if self._store is not None:
                self._store.restore(self._llama, tokens)
            known = shared(self._llama.input_ids[: self._llama.n_tokens], tokens)
            result = self._complete(request, tokens, on_text)
            if self._store is not None and len(tokens) - known >= SAVE_MIN:
                self._store.save(self._llama)
            return result

    def _limit(self, request: ChatRequest) -> int:
        return min(request.max_tokens or self.settings.max_tokens, self.settings.max_tokens)

    def generate(
        self,
        tokens: list[int],
        limit: int,
        temperature: float,
        grammar: Any,
        stop: Sequence[str] = (END,),
        on_text: Callable[[str], None] | None = None,
    ) -> Generated:
        """Decode after `tokens` until a stop string, `limit` tokens or the deadline."""
        deadline: list[float] = []
        late: list[bool] = []
        seen = [len(tokens)]

        def past_deadline(ids: Any, logits: Any) -> bool:
            now = time.monotonic()
            seen.append(len(ids))
            if not deadline:
                deadline.append(now + self.settings.request_timeout_secs)
            if now > deadline[0] or self._closing.is_set():
                late.append(True)
            return bool(late)

        output = self._llama.create_completion(
            tokens,
            max_tokens=limit,
            temperature=temperature,
            repeat_penalty=REPEAT_PENALTY,
            grammar=grammar,
            stop=list(stop),
            stopping_criteria=self._cpp.StoppingCriteriaList([past_deadline]),
            stream=on_text is not None,
        )
        if on_text is None:
            choice = output["choices"][0]
            text, reason = str(choice["text"]), choice["finish_reason"]
            used = int(output["usage"]["completion_tokens"])
        else:
            pieces, reason = [], None
            for chunk in output:
                choice = chunk["choices"][0]
                pieces.append(str(choice["text"]))
                on_text(pieces[-1])
                reason = choice["finish_reason"] or reason
            text, used = "".join(pieces), max(seen) - len(tokens) + 1
        finish = "length" if late or reason != "stop" else "stop"
        return Generated(text, finish, min(used, limit))

    def _call(
        self, tokens: list[int], tools: Sequence[ToolSpec], limit: int, temperature: float
    ) -> tuple[Generated, dict[str, Any] | None]:
        """A call decoded under the grammar of `tools`, after an opening `<tool_call>` tag."""
        opened = tokens + self.tokens(CALL_OPEN)
        generated = self.generate(opened, limit, temperature, self.grammar("call", tools, limit))
        ok = generated.finish == "stop"
        return generated, parse_call(generated.text.strip(), tools) if ok else None

    def _complete(
        self, request: ChatRequest, tokens: list[int], on_text: Callable[[str], None] | None
    ) -> ChatResult:
        mode, tools = choose_mode(request, self.settings.tool_calls)
        limit = self._limit(request)

        def result(text: str | None, calls: list[Any], finish: str, used: int) -> ChatResult:
            return ChatResult(text, calls, finish, len(tokens), used)

        if mode == "call":
            generated, call = self._call(tokens, tools, limit, request.temperature)
            if call is not None:
                return result(None, [call], "tool_calls", generated.tokens)
            return result(generated.text.strip(), [], generated.finish, generated.tokens)
        if mode in ("text", "json"):
            schema = request.response_format
            grammar = self.schema_grammar(schema) if schema else self.grammar("text", [], limit)
            generated = self.generate(tokens, limit, request.temperature, grammar, (END,), on_text)
            return result(generated.text.strip(), [], generated.finish, generated.tokens)
        stops = (END, "</tool_call>")
        free = self.generate(tokens, limit, request.temperature, None, stops, on_text)
        text = free.text + ("</tool_call>" if "<tool_call>" in free.text else "")
        found = find_calls(text, tools)
        if found.calls:
            return result(found.prose or None, found.calls, "tool_calls", free.tokens)
        empty = not free.text.strip()
        if self.settings.tool_calls != "hybrid" or not (found.attempted or empty):
            return result(free.text.strip(), [], free.finish, free.tokens)
        if empty:  # a being would be told nothing: a plain answer, which cannot be empty
            plain = self._plain(tokens, limit, request.temperature)
            return result(plain.text.strip(), [], plain.finish, free.tokens + plain.tokens)
        named = [tool for tool in tools if tool.name == found.named] or tools
        again, call = self._call(tokens, named, limit, request.temperature)
        if call is not None:
            return result(None, [call], "tool_calls", free.tokens + again.tokens)
        # Neither decoding made a call: a plain answer rather than a broken or empty one.
        plain = self._plain(tokens, limit, request.temperature)
        used = free.tokens + again.tokens + plain.tokens
        return result(plain.text.strip(), [], plain.finish, used)

    def _plain(self, tokens: list[int], limit: int, temperature: float) -> Generated:
        """A plain answer under the text grammar: at least one character, never JSON."""
        return self.generate(tokens, limit, temperature, self.grammar("text", [], limit))
