"""The embedded gateway's configuration and model selectors (decision 7); forwarding a
request to the upstream of its route is in `forwarding`.

A config file is TOML; every table and key is optional:

    [gateway]
    queue_size = 4                 # completions that may wait for the local model
    default_model = "local/qwen2.5-coder-1.5b-instruct"

    [local]                        # the model served in-process
    enabled = true
    model = "qwen2.5-coder-1.5b"   # or qwen2.5-coder-0.5b, smollm2-135m
    model_dir = "~/.cache/singularity/models"   # where `brama fetch` put it
    model_path = "/path/to.gguf"   # instead: any ChatML GGUF (advertised as local/<stem>)
    model_id = "local/my-model"    # default: local/<model>-instruct
    tool_calls = "hybrid"          # or "free", "grammar" (see local_model)
    n_ctx = 4096
    threads = 1                    # default: one less than the cores
    max_tokens = 256               # cap on any request's max_tokens
    max_text_chars = 600           # cap on a plain answer's length
    request_timeout_secs = 120
    seed = 42
    prompt_cache_dir = "~/.cache/singularity/prompts"   # evaluated prompts kept; "" for none

    [selectors]                    # selector -> advertised model id
    best = "openai/gpt-4o-mini"
    "task:code" = "openai/gpt-4o-mini"
    "task:*" = "local/smollm2-135m-instruct"   # with [local] model = "smollm2-135m"

    [[upstream]]                   # an OpenAI-compatible provider
    name = "openai"
    base_url = "https://api.openai.com/v1"   # what an OpenAI SDK would be given
    key_file = "~/.config/singularity/openai.key"   # optional; 0600, sent as Bearer
    models = ["gpt-4o-mini", "gpt-4o"]               # advertised as openai/<model>
    vision = ["gpt-4o"]
    timeout_secs = 120

Selectors: `any`, `best` and `task:<name>` take their `[selectors]` entry (a task
falls back to `task:*`), else the default model: `default_model`, else the local
model, else the first upstream model. `any-vision-capable` takes its entry, else the
first model listed under some `vision`, else the default model: requests reach this
gateway as text, so a being that switched to that selector keeps living rather than
failing permanently. Anything else must be an advertised id exactly.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from singularity.errors import ConfigurationError
from singularity.gateway.auth import Secret
from singularity.gateway_server.model_catalogue import DEFAULT_MODEL, MODELS
from singularity.secrets import read_secret_file

LOCAL_MODEL_ID: Final = MODELS[DEFAULT_MODEL].model_id
TOOL_CALL_MODES: Final = ("hybrid", "free", "grammar")
SELECTORS: Final = ("any", "any-vision-capable", "best")
TASK_PREFIX: Final = "task:"


@dataclass(frozen=True)
class LocalSettings:
    """How the in-process model is loaded and bounded."""

    enabled: bool = True
    model: str = DEFAULT_MODEL
    model_dir: str | None = None
    model_path: str | None = None
    model_id: str | None = None
    tool_calls: str = "hybrid"
    n_ctx: int = 4096
    # One core is left to the beings and the event loop: llama.cpp's threads spin while
    # they wait for each other, and on a busy 2-core machine 2 threads ran 15x slower than 1.
    threads: int = field(default_factory=lambda: max(1, (os.cpu_count() or 2) - 1))
    max_tokens: int = 256
    max_text_chars: int = 600
    request_timeout_secs: float = 120.0
    seed: int = 42
    # Where evaluated prompts are kept across restarts (`prompt_store`); "" keeps none.
    prompt_cache_dir: str | None = None

    @property
    def served_id(self) -> str:
        """The id `v1/models` advertises for the local model."""
        if self.model_id:
            return self.model_id
        if self.model_path:
            return f"local/{Path(self.model_path).stem.lower()}"
        return MODELS[self.model].model_id


@dataclass(frozen=True)
class Upstream:
    """One OpenAI-compatible provider the gateway forwards to."""

    name: str
    base_url: str
    models: tuple[str, ...]
    vision: frozenset[str] = frozenset()
    key: Secret | None = None
    timeout_secs: float = 120.0

    @property
    def completions_url(self) -> str:
        """`<base_url>/chat/completions`, as OpenAI SDKs build it."""
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class Route:
    """An advertised model id and where its requests go (`upstream` None: the local model)."""

    id: str
    model: str
    upstream: Upstream | None = None
    vision: bool = False


@dataclass(frozen=True)
class GatewayConfig:
    """The whole gateway configuration."""

    local: LocalSettings = field(default_factory=LocalSettings)
    upstreams: tuple[Upstream, ...] = ()
    selectors: Mapping[str, str] = field(default_factory=dict)
    default_model: str | None = None
    queue_size: int = 4


class UnknownModel(LookupError):
    """The requested model is neither a selector nor an advertised id."""


def _table(document: Mapping[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise ConfigurationError(f"brama config: [{key}] must be a table")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigurationError(f"brama config: unknown key in [{key}]: {', '.join(unknown)}")
    return value


_KINDS: Final = {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}


def _typed(table: Mapping[str, Any], where: str, key: str, kind: type, default: Any) -> Any:
    value = table.get(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if value is not None and (
        not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)
    ):
        raise ConfigurationError(f"brama config: {where}.{key} must be {_KINDS[kind]}")
    if kind is not bool and isinstance(value, int | float) and value <= 0 and key != "seed":
        raise ConfigurationError(f"brama config: {where}.{key} must be positive")
    return value


def _local(document: Mapping[str, Any]) -> LocalSettings:
    names = {name for name in LocalSettings.__dataclass_fields__}
    table = _table(document, "local", names)
    base = LocalSettings()
    optional = {"model_path", "model_dir", "model_id", "prompt_cache_dir"}
    values = {
        name: _typed(table, "local", name, type(getattr(base, name)), getattr(base, name))
        for name in names - optional
    }
    paths = {name: _typed(table, "local", name, str, None) for name in optional}
    for name in ("model_path", "model_dir"):
        paths[name] = os.path.expanduser(paths[name]) if paths[name] else None
    if paths["prompt_cache_dir"]:  # "" stays "": no prompt is kept
        paths["prompt_cache_dir"] = os.path.expanduser(paths["prompt_cache_dir"])
    return checked_local(LocalSettings(**values, **paths))


def checked_local(settings: LocalSettings) -> LocalSettings:
    """`settings`, or a `ConfigurationError` naming an unknown model or tool-call mode."""
    if settings.model not in MODELS:
        raise ConfigurationError(
            f"brama config: local.model {settings.model!r} is not one of {', '.join(MODELS)}"
        )
    if settings.tool_calls not in TOOL_CALL_MODES:
        raise ConfigurationError(
            f"brama config: local.tool_calls must be one of {', '.join(TOOL_CALL_MODES)}"
        )
    return settings


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(f"brama config: {where} must be an array of non-empty strings")
    return tuple(value)


def _upstream(entry: Any, index: int) -> Upstream:
    where = f"upstream[{index}]"
    if not isinstance(entry, dict):
        raise ConfigurationError(f"brama config: {where} must be a table")
    allowed = {"name", "base_url", "key_file", "models", "vision", "timeout_secs"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ConfigurationError(f"brama config: unknown key in {where}: {', '.join(unknown)}")
    name = _typed(entry, where, "name", str, None)
    base_url = _typed(entry, where, "base_url", str, None)
    if not name or "/" in name or not base_url:
        raise ConfigurationError(f"brama config: {where} needs a name (no '/') and a base_url")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigurationError(f"brama config: {where}.base_url must be an http(s) URL")
    models = _strings(entry.get("models"), f"{where}.models")
    vision = _strings(entry.get("vision", []), f"{where}.vision")
    if not set(vision) <= set(models):
        raise ConfigurationError(f"brama config: {where}.vision must list some of its models")
    key_file = _typed(entry, where, "key_file", str, None)
    key = Secret(read_secret_file(os.path.expanduser(key_file)).value) if key_file else None
    timeout = _typed(entry, where, "timeout_secs", float, 120.0)
    return Upstream(name, base_url, models, frozenset(vision), key, timeout)


def parse_config(document: Mapping[str, Any]) -> GatewayConfig:
    """A validated configuration from a parsed TOML document."""
    unknown = sorted(set(document) - {"gateway", "local", "selectors", "upstream"})
    if unknown:
        raise ConfigurationError(f"brama config: unknown table: {', '.join(unknown)}")
    gateway = _table(document, "gateway", {"queue_size", "default_model"})
    selectors = document.get("selectors", {})
    if not isinstance(selectors, dict) or not all(isinstance(v, str) for v in selectors.values()):
        raise ConfigurationError("brama config: [selectors] must map selectors to model ids")
    raw_upstreams = document.get("upstream", [])
    if not isinstance(raw_upstreams, list):
        raise ConfigurationError("brama config: upstream must be an array of tables ([[upstream]])")
    config = GatewayConfig(
        local=_local(document),
        upstreams=tuple(_upstream(entry, i) for i, entry in enumerate(raw_upstreams)),
        selectors=dict(selectors),
        default_model=_typed(gateway, "gateway", "default_model", str, None),
        queue_size=_typed(gateway, "gateway", "queue_size", int, 4),
    )
    Router(config)  # validates ids, selector targets and the default model
    return config


def load_config(path: str | None) -> GatewayConfig:
    """The configuration in the TOML file at `path`, or the defaults when `path` is None."""
    if path is None:
        return GatewayConfig()
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigurationError(f"cannot read brama config {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"brama config {path} is not valid TOML: {error}") from None
    return parse_config(document)


class Router:
    """Advertised model ids, in order, and the resolution of selectors to them."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        routes: list[Route] = []
        if config.local.enabled:
            routes.append(Route(config.local.served_id, config.local.served_id))
        for upstream in config.upstreams:
            routes.extend(
                Route(f"{upstream.name}/{model}", model, upstream, model in upstream.vision)
                for model in upstream.models
            )
        self.routes: dict[str, Route] = {}
        for route in routes:
            if route.id in self.routes:
                raise ConfigurationError(f"brama config: model id {route.id} is listed twice")
            self.routes[route.id] = route
        if not self.routes:
            raise ConfigurationError(
                "brama config: no model to serve (local disabled, no upstream)"
            )
        for selector, target in config.selectors.items():
            if selector not in SELECTORS and not selector.startswith(TASK_PREFIX):
                raise ConfigurationError(f"brama config: {selector} is not a selector")
            self._known(target, f"selector {selector}")
        self.default = self._known(config.default_model or next(iter(self.routes)), "default_model")

    def _known(self, model_id: str, where: str) -> Route:
        if model_id not in self.routes:
            raise ConfigurationError(f"brama config: {where} names unknown model {model_id}")
        return self.routes[model_id]

    @property
    def model_ids(self) -> list[str]:
        """The exact ids listed by `v1/models`."""
        return list(self.routes)

    def resolve(self, requested: str) -> Route:
        """The route serving `requested`, an exact id or a selector; `UnknownModel` if none."""
        if requested in self.routes:
            return self.routes[requested]
        chosen = self.config.selectors.get(requested)
        if requested.startswith(TASK_PREFIX):
            chosen = chosen or self.config.selectors.get(TASK_PREFIX + "*")
        elif requested == "any-vision-capable" and chosen is None:
            vision = [route.id for route in self.routes.values() if route.vision]
            chosen = vision[0] if vision else None
        elif requested not in SELECTORS:
            raise UnknownModel(requested)
        return self.routes[chosen] if chosen else self.default
