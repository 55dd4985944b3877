"""Configuration: every option as a flag, an environment variable and a config-file key.

Precedence is flag > environment > TOML file > default (decision 2). This is the only
module that reads `os.environ`. The result is a frozen `Settings`, resolved once and
passed down; the checks of spec §3.2 live in `singularity.settings_check`.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from singularity.errors import ConfigurationError
from singularity.money import RANGE_TEXT, MoneyRangeError, parse_money
from singularity.secrets import Secret
from singularity.state_place import settle_state_url
from singularity.text import trim, utf8_length

Kind = Literal["text", "int", "u32", "decimal", "number", "bool"]
DEFAULT_CONFIG_FILE = "singularity.toml"
DEFAULT_WORKSPACE = "workspace"
"""Beside the default state directory `.singularity`, never containing it (decision 24)."""
UNPINNED_HEX = "0" * 64
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1
_INT_TEXT = re.compile(r"\+?[0-9]+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_NUMBER_TEXT = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)",
    re.IGNORECASE,
)
CONFIG_ENV = "SINGULARITY_CONFIG"


@dataclass(frozen=True)
class Option:
    """One option: its settings name (also the TOML key), flag, variable, default and kind."""

    name: str
    flag: str
    env: str | None
    default: str | None
    kind: Kind
    help: str
    aliases: tuple[str, ...] = ()
    """Further flags for the same option (`--skills` for `--skills-file`, decision 18)."""
    fallback_env: str | None = None
    """A variable read after the config file, before the default (`OPENAI_BASE_URL`)."""
    choices: tuple[str, ...] = ()
    """The only values a text option may take (none: any text)."""


def _opt(name: str, env: str | None, default: str | None, kind: Kind, help: str) -> Option:
    return Option(name, "--" + name.replace("_", "-"), env, default, kind, help)


IDENTITY_OPTIONS = (
    _opt("agent_id", "SINGULARITY_AGENT_ID", "local", "text", "Immutable agent identifier."),
    _opt("agent_name", "SINGULARITY_AGENT_NAME", "MyAgent", "text", "The being's name."),
    _opt("agent_ticker", "SINGULARITY_AGENT_TICKER", "AGENT", "text", "The being's ticker."),
    _opt("agent_type", "SINGULARITY_AGENT_TYPE", "general", "text", "The being's type."),
    _opt("specialty", "SINGULARITY_SPECIALTY", "general", "text", "What the being specializes in."),
    _opt("role", "SINGULARITY_ROLE", "being", "text", "Immutable role identifier."),
    _opt("environment", "SINGULARITY_ENVIRONMENT", "local", "text", "Environment identifier."),
    _opt("host", "SINGULARITY_HOST", "localhost", "text", "Host identifier."),
    _opt("workload_id", "SINGULARITY_WORKLOAD_ID", "local", "text", "Workload identifier."),
    _opt(
        "workload_public_key",
        "SINGULARITY_WORKLOAD_PUBLIC_KEY",
        UNPINNED_HEX,
        "text",
        "Workload public key, 64 lowercase hex (zeros: unpinned).",
    ),
    _opt(
        "executable_digest",
        "SINGULARITY_EXECUTABLE_SHA256",
        UNPINNED_HEX,
        "text",
        "SHA-256 of the executable, 64 lowercase hex.",
    ),
    _opt(
        "code_digest",
        "SINGULARITY_CODE_SHA256",
        UNPINNED_HEX,
        "text",
        "SHA-256 of the code, 64 lowercase hex.",
    ),
    _opt(
        "policy_digest",
        "SINGULARITY_POLICY_SHA256",
        UNPINNED_HEX,
        "text",
        "SHA-256 of the policy, 64 lowercase hex.",
    ),
    _opt("policy_sequence", "SINGULARITY_POLICY_SEQUENCE", "0", "int", "Policy sequence number."),
)

LOOP_OPTIONS = (
    _opt(
        "stimulus",
        "SINGULARITY_STIMULUS",
        None,
        "text",
        "An external observation injected once, in the being's first cycle.",
    ),
    _opt(
        "starting_balance",
        "SINGULARITY_STARTING_BALANCE_USD",
        "10",
        "decimal",
        "Starting balance in USD of a new being.",
    ),
    _opt(
        "instance_price",
        "SINGULARITY_INSTANCE_USD_PER_HOUR",
        "0",
        "decimal",
        "Instance price in USD per hour of model-call time.",
    ),
    _opt(
        "input_price",
        "BRAMA_INPUT_PRICE_USD_PER_MILLION",
        "0",
        "decimal",
        "USD per million prompt tokens.",
    ),
    _opt(
        "output_price",
        "BRAMA_OUTPUT_PRICE_USD_PER_MILLION",
        "0",
        "decimal",
        "USD per million completion tokens.",
    ),
    _opt(
        "cycle_interval_secs",
        "SINGULARITY_CYCLE_INTERVAL_SECS",
        "5",
        "number",
        "Seconds to sleep between cycles in `run`.",
    ),
    _opt("max_tool_rounds", "SINGULARITY_MAX_TOOL_ROUNDS", "8", "int", "Model rounds per cycle."),
    _opt(
        "context_tokens",
        "SINGULARITY_CONTEXT_TOKENS",
        "8192",
        "int",
        "Token budget of the conversation sent with each model call.",
    ),
    _opt(
        "workspace",
        "SINGULARITY_WORKSPACE",
        DEFAULT_WORKSPACE,
        "text",
        "The directory the file tools are confined to (the default is created at birth).",
    ),
    _opt("resume", "SINGULARITY_RESUME", "false", "bool", "Resume the existing being."),
    _opt(
        "review_self_edits",
        "SINGULARITY_REVIEW_SELF_EDITS",
        "false",
        "bool",
        "Hold prompt replacements, rules and learnings for an operator's decision.",
    ),
    Option(
        "output_boundary",
        "--output-boundary",
        "SINGULARITY_OUTPUT_BOUNDARY",
        "redact",
        "text",
        "How tool results cross the output boundary: `redact` (replace what may not cross "
        "and say so) or `strict` (reject the whole result, spec §10.4).",
        choices=("redact", "strict"),
    ),
)

STATE_OPTIONS = (
    _opt(
        "state_dir", "SINGULARITY_STATE_DIR", ".singularity", "text", "The being's state directory."
    ),
)

STORE_OPTIONS = (
    _opt(
        "state_url",
        "SINGULARITY_STATE_URL",
        None,
        "text",
        "Where the being lives: a PostgreSQL store (postgresql://…, being --agent-id, its local "
        "files in --state-dir) or a state directory (a path or file:// URL, as --state-dir).",
    ),
)

BRAMA_OPTIONS = (
    Option(
        "brama_url",
        "--brama-url",
        "BRAMA_BASE_URL",
        "http://127.0.0.1:8081",
        "text",
        "Base URL of the OpenAI-compatible model gateway (`…/v1` is the same server; "
        "OPENAI_BASE_URL if nothing else sets it).",
        fallback_env="OPENAI_BASE_URL",
    ),
    _opt("brama_model", "BRAMA_MODEL", "any", "text", "Model id or selector for a new being."),
    _opt(
        "brama_secret_file",
        "BRAMA_HMAC_SECRET_FILE",
        None,
        "text",
        "File holding the HMAC secret that signs gateway requests.",
    ),
    _opt(
        "brama_api_key_file",
        "BRAMA_API_KEY_FILE",
        None,
        "text",
        "File holding a bearer API key for the gateway.",
    ),
    _opt(
        "brama_tool_choice",
        "BRAMA_TOOL_CHOICE",
        None,
        "text",
        "`tool_choice` sent with the tools: `auto`, `required` or `none` (default: none sent).",
    ),
    _opt("max_tokens", "BRAMA_MAX_TOKENS", "2048", "u32", "max_tokens of each completion."),
    _opt("temperature", "BRAMA_TEMPERATURE", "0.2", "number", "Sampling temperature (0–2)."),
    _opt(
        "http_timeout_secs",
        "SINGULARITY_HTTP_TIMEOUT_SECS",
        "120",
        "number",
        "Total timeout of each gateway or Most request.",
    ),
)

SKILL_OPTIONS = (
    Option(
        "skills_file",
        "--skills-file",
        "SINGULARITY_SKILLS_FILE",
        None,
        "text",
        "JSON file of MCP servers (`mcpServers` format).",
        aliases=("--skills",),
    ),
    _opt("las_command", "LAS_COMMAND", "node", "text", "Program that runs the Las entrypoint."),
    _opt(
        "las_entrypoint",
        "LAS_MCP_ENTRYPOINT",
        None,
        "text",
        "Las MCP entrypoint; enables the Las aggregator.",
    ),
    _opt(
        "las_only",
        "LAS_ONLY",
        "weles,skarbiec,tama,stado,lem,echo,most,probierz,byk,brama,warsztat,finance",
        "text",
        "Surfaces Las serves (passed verbatim).",
    ),
    _opt("las_skip", "LAS_SKIP", None, "text", "Surfaces Las skips (passed verbatim)."),
    _opt(
        "las_release_manifest",
        "LAS_RELEASE_MANIFEST_FILE",
        None,
        "text",
        "Las release manifest (absolute regular file).",
    ),
    _opt(
        "las_release_manifest_signature",
        "LAS_RELEASE_MANIFEST_SIGNATURE_FILE",
        None,
        "text",
        "Las release manifest signature (absolute regular file).",
    ),
    _opt(
        "las_release_trust_store",
        "LAS_RELEASE_TRUST_STORE_FILE",
        None,
        "text",
        "Las release trust store (absolute regular file).",
    ),
    _opt(
        "las_release_watermark",
        "LAS_RELEASE_WATERMARK_FILE",
        None,
        "text",
        "Las release watermark (absolute path).",
    ),
    _opt(
        "required_surfaces",
        "SINGULARITY_REQUIRED_SURFACES",
        "",
        "text",
        "Comma-separated skill surfaces that must be present at boot.",
    ),
    _opt(
        "mcp_timeout_secs",
        "SINGULARITY_MCP_TIMEOUT_SECS",
        "120",
        "number",
        "Deadline of each MCP request.",
    ),
    _opt(
        "shutdown_grace_secs",
        "SINGULARITY_SHUTDOWN_GRACE_SECS",
        "10",
        "number",
        "Seconds a skill server gets to exit before it is killed.",
    ),
    _opt(
        "most_url",
        "MOST_BASE_URL",
        "http://127.0.0.1:8080",
        "text",
        "Base URL of the Most messaging service.",
    ),
    _opt(
        "most_token_file",
        "MOST_SERVICE_TOKEN_FILE",
        None,
        "text",
        "File holding the Most bearer token; enables the Most tools.",
    ),
)

SANCTUM_OPTIONS = (
    _opt(
        "sanctum_dir",
        "SINGULARITY_SANCTUM_DIR",
        None,
        "text",
        "The being's sanctum (human-readable memory) [default: <state-dir>/sanctum].",
    ),
    _opt(
        "pulse",
        "SINGULARITY_PULSE",
        "false",
        "bool",
        "Pulse mode: `run` lives scheduled quiet cycles (PULSE.md) instead of back-to-back ones.",
    ),
    _opt(
        "pulse_frequency",
        "SINGULARITY_PULSE_FREQUENCY",
        "6h",
        "text",
        "Pulse frequency written to a new PULSE.md, and used when PULSE.md names none.",
    ),
    _opt(
        "pulse_quiet_hours",
        "SINGULARITY_PULSE_QUIET_HOURS",
        "",
        "text",
        "Quiet hours no pulse starts in, e.g. `22:00-07:00 UTC` (PULSE.md's add to them).",
    ),
    _opt(
        "pulse_max_rounds",
        "SINGULARITY_PULSE_MAX_ROUNDS",
        "8",
        "int",
        "Model rounds one pulse may use (at most max-tool-rounds).",
    ),
    _opt(
        "pulse_max_cost",
        "SINGULARITY_PULSE_MAX_COST_USD",
        "0.1",
        "decimal",
        "USD one pulse may spend on model calls.",
    ),
)

JOURNAL_OPTIONS = (
    _opt(
        "journal_url",
        "SINGULARITY_JOURNAL_URL",
        None,
        "text",
        "Private journal database: `sqlite:///PATH` or `postgresql://…` "
        "[default: <state-dir>/journal.sqlite3].",
    ),
    _opt(
        "journal_key_file",
        "SINGULARITY_JOURNAL_KEY_FILE",
        None,
        "text",
        "The journal's 0600 keyring file [default: <state-dir>/journal.key].",
    ),
    _opt(
        "journal_retention_days",
        "SINGULARITY_JOURNAL_RETENTION_DAYS",
        "30",
        "int",
        "Days a journal entry lives before it is purged (at least 1).",
    ),
    _opt(
        "journal_keep_promoted",
        "SINGULARITY_JOURNAL_KEEP_PROMOTED",
        "false",
        "bool",
        "Keep promoted journal entries past the retention window.",
    ),
    _opt(
        "journal_embedder",
        "SINGULARITY_JOURNAL_EMBEDDER",
        "auto",
        "text",
        "Journal embeddings: `auto` (the local model if installed), `minilm` or `hashing`.",
    ),
)

ALL_OPTIONS = (
    IDENTITY_OPTIONS
    + LOOP_OPTIONS
    + STATE_OPTIONS
    + STORE_OPTIONS
    + BRAMA_OPTIONS
    + SKILL_OPTIONS
    + SANCTUM_OPTIONS
    + JOURNAL_OPTIONS
)
OPTIONS_BY_NAME = {option.name: option for option in ALL_OPTIONS}


def _fleet_opt(name: str, default: str | None, kind: Kind, help: str) -> Option:
    """A fleet option; its variable is `SINGULARITY_` and its name in capitals."""
    return _opt(name, "SINGULARITY_" + name.upper(), default, kind, help)


FLEET_OPTIONS = (
    _fleet_opt("temporal", "127.0.0.1:7233", "text", "The fleet's Temporal server, HOST:PORT."),
    _fleet_opt("temporal_namespace", "default", "text", "The fleet's Temporal namespace."),
    _fleet_opt(
        "temporal_tls",
        None,
        "bool",
        "Reach Temporal over TLS (on by itself when a TLS file or an API key is named).",
    ),
    _fleet_opt(
        "temporal_ca_file",
        None,
        "text",
        "PEM file of the authority that signed Temporal's certificate [default: the system's].",
    ),
    _fleet_opt(
        "temporal_tls_server_name",
        None,
        "text",
        "The name Temporal's certificate is checked for, and sent as SNI [default: the host].",
    ),
    _fleet_opt(
        "temporal_cert_file",
        None,
        "text",
        "PEM file of this client's certificate for mTLS (with --temporal-key-file).",
    ),
    _fleet_opt(
        "temporal_key_file",
        None,
        "text",
        "PEM file of this client's private key for mTLS (a 0600 secret file).",
    ),
    _fleet_opt(
        "temporal_api_key_file",
        None,
        "text",
        "File holding a Temporal Cloud API key (a 0600 secret file; TLS on).",
    ),
    _fleet_opt(
        "task_queue",
        "beings",
        "text",
        "The task queue of the fleet's workers (a queue of its own pins beings to machines).",
    ),
    _fleet_opt(
        "state_url",
        None,
        "text",
        "The fleet's state store: a directory holding one folder per being, or a "
        "PostgreSQL state store (postgresql://…, with --local-dir).",
    ),
    _fleet_opt(
        "local_dir",
        None,
        "text",
        "With a PostgreSQL --state-url: this machine's folder of the beings' local files "
        "(inbox, sanctum, private journal, workspace), one folder per being.",
    ),
)
"""Options of `singularity worker` and `singularity fleet` (resolved by `resolve_fleet`)."""
# Variables holding raw credentials rather than file paths (decision 5, spec §3.1).
RAW_SECRET_ENVS = ("WISENT_APP_AGENT_AUTH_SECRET", "BRAMA_API_KEY")
# OpenAI's own variable is the last fallback for the bearer key (decision 22): it is read
# as BRAMA_API_KEY, so it travels and is refused like it.
BEARER_FALLBACK_ENV = "OPENAI_API_KEY"
LOG_ENV = "SINGULARITY_LOG"


@dataclass(frozen=True)
class Settings:
    """Every option, resolved and parsed."""

    agent_id: str
    agent_name: str
    agent_ticker: str
    agent_type: str
    specialty: str
    role: str
    environment: str
    host: str
    workload_id: str
    workload_public_key: str
    executable_digest: str
    code_digest: str
    policy_digest: str
    policy_sequence: int
    stimulus: str | None
    starting_balance: Decimal
    instance_price: Decimal
    input_price: Decimal
    output_price: Decimal
    cycle_interval_secs: float
    max_tool_rounds: int
    context_tokens: int
    workspace: str
    resume: bool
    review_self_edits: bool
    output_boundary: str
    state_dir: str
    state_url: str | None  # a PostgreSQL store only: a directory URL becomes `state_dir`
    brama_url: str
    brama_model: str
    brama_secret_file: str | None
    brama_api_key_file: str | None
    brama_tool_choice: str | None
    max_tokens: int
    temperature: float
    http_timeout_secs: float
    skills_file: str | None
    las_command: str
    las_entrypoint: str | None
    las_only: str
    las_skip: str | None
    las_release_manifest: str | None
    las_release_manifest_signature: str | None
    las_release_trust_store: str | None
    las_release_watermark: str | None
    required_surfaces: str
    mcp_timeout_secs: float
    shutdown_grace_secs: float
    most_url: str
    most_token_file: str | None
    sanctum_dir: str | None
    pulse: bool
    pulse_frequency: str
    pulse_quiet_hours: str
    pulse_max_rounds: int
    pulse_max_cost: Decimal
    journal_url: str | None
    journal_key_file: str | None
    journal_retention_days: int
    journal_keep_promoted: bool
    journal_embedder: str
    raw_secrets: Mapping[str, Secret]
    log_level: str
    config_file: str | None
    ignored_config_file: str | None = None
    """`./singularity.toml`, when it was not read because the being could have written it."""

    @property
    def required_surface_list(self) -> list[str]:
        """Required surfaces: items trimmed, empties dropped."""
        return [item.strip() for item in self.required_surfaces.split(",") if item.strip()]

    def environment_values(self) -> dict[str, str]:
        """The settings as the environment variables that would reproduce them (no secrets)."""
        values: dict[str, str] = {}
        for option in ALL_OPTIONS:
            value = getattr(self, option.name)
            if option.env is None or value is None:
                continue
            values[option.env] = _render(value)
        return values


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _source_label(option: Option, source: str) -> str:
    labels = {
        "flag": option.flag,
        "env": option.env or option.flag,
        "fallback": option.fallback_env or option.name,
    }
    return labels.get(source, option.name)


def _parse(option: Option, raw: object, source: str) -> object:
    label = _source_label(option, source)
    if option.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw in ("true", "false"):
            return raw == "true"
        raise ConfigurationError(f"{label} must be true or false")
    text = raw if isinstance(raw, str) else None
    if text is not None and utf8_length(text) is None:
        # A byte of the environment or the command line that is not UTF-8 reads as a lone
        # surrogate, which no state file or request can hold.
        raise ConfigurationError(f"{label} is not valid UTF-8")
    if option.kind == "text":
        if text is None:
            raise ConfigurationError(f"{label} must be a string")
        if "\x00" in text and option.name != "stimulus":  # the stimulus has its own rule
            raise ConfigurationError(f"{label} must not contain NUL")
        if option.choices and text not in option.choices:
            raise ConfigurationError(f"{label} must be {' or '.join(option.choices)}")
        return text
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ConfigurationError(f"{label} must be a number")
    # Python's int(), float() and Decimal() also accept surrounding whitespace, `_`
    # separators and non-ASCII digits; option values are held to plain ASCII forms.
    if option.kind in ("int", "u32"):
        number: int | None = None
        if isinstance(raw, int):
            number = raw
        elif isinstance(raw, str) and _INT_TEXT.fullmatch(raw):
            number = int(raw)
        if option.kind == "u32" and (number is None or not 0 <= number <= U32_MAX):
            raise ConfigurationError(f"{label} must be an integer from 0 to {U32_MAX}")
        if number is None or number < 0 or number > U64_MAX:
            raise ConfigurationError(f"{label} must be a non-negative integer")
        return number
    if option.kind == "decimal":
        if isinstance(raw, str) and not _DECIMAL_TEXT.fullmatch(raw):
            raise ConfigurationError(f"{label} must be a decimal number")
        try:
            return parse_money(raw)
        except MoneyRangeError:
            raise ConfigurationError(f"{label} must be {RANGE_TEXT}") from None
        except ValueError:
            raise ConfigurationError(f"{label} must be a decimal number") from None
    if isinstance(raw, str) and not _NUMBER_TEXT.fullmatch(raw):
        raise ConfigurationError(f"{label} must be a number")
    return float(raw)


def parse_option(name: str, raw: object) -> object:
    """One option's value parsed as its flag would be (ConfigurationError names the flag)."""
    return _parse(OPTIONS_BY_NAME[name], raw, "flag")


def resolve_fleet(
    flags: Mapping[str, object | None], environ: Mapping[str, str] | None = None
) -> dict[str, object]:
    """The fleet options, parsed (text, or a bool for `temporal_tls`; None when unset):
    flag > environment > default."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for option in FLEET_OPTIONS:
        raw = flags.get(option.name)
        source = "flag"
        if raw is None and option.env is not None and option.env in env:
            raw, source = env[option.env], "env"
        if raw is None:
            raw, source = option.default, "default"
        values[option.name] = None if raw is None else _parse(option, raw, source)
    return values


def read_config_file(path: str) -> dict[str, Any]:
    """Read a TOML config file whose keys are option names."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise ConfigurationError(f"config file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigurationError(f"config file {path}: {error}") from None
    except RecursionError:
        raise ConfigurationError(f"config file {path}: nested too deeply") from None
    except ValueError:  # a NUL in the path
        raise ConfigurationError(f"config file {path!r}: not a valid path") from None
    unknown = sorted(set(document) - set(OPTIONS_BY_NAME))
    if unknown:
        raise ConfigurationError(f"config file {path}: unknown option {unknown[0]}")
    return document


def _workspace_value(
    flags: Mapping[str, object | None], env: Mapping[str, str], file_values: Mapping[str, Any]
) -> str:
    option = OPTIONS_BY_NAME["workspace"]
    for value in (flags.get(option.name), env.get(option.env or ""), file_values.get(option.name)):
        if isinstance(value, str):
            return value
    return DEFAULT_WORKSPACE


def _cwd_in_workspace(workspace: str) -> bool:
    """Whether the working directory is the workspace or inside it."""
    try:
        cwd = os.path.realpath(os.getcwd())
        root = os.path.realpath(workspace)
    except (OSError, ValueError):
        return False
    return cwd == root or cwd.startswith(root.rstrip("/") + "/")


def resolve(
    flags: Mapping[str, object | None],
    *,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every option: flag > environment > config file > default."""
    env = os.environ if environ is None else environ
    file_path = config_file or env.get(CONFIG_ENV)
    ignored: str | None = None
    file_values: dict[str, Any] = {}
    if file_path is not None:
        file_values = read_config_file(file_path)
    elif Path(DEFAULT_CONFIG_FILE).is_file():
        # Decision 31: a file in a workspace is one the being can write, so the default file
        # is not read when the working directory is the workspace or inside it.
        if _cwd_in_workspace(_workspace_value(flags, env, {})):
            ignored = DEFAULT_CONFIG_FILE
        else:
            file_values = read_config_file(DEFAULT_CONFIG_FILE)
            if _cwd_in_workspace(_workspace_value(flags, env, file_values)):
                ignored, file_values = DEFAULT_CONFIG_FILE, {}
            else:
                file_path = DEFAULT_CONFIG_FILE
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    for option in ALL_OPTIONS:
        flag_value = flags.get(option.name)
        if flag_value is not None:
            raw, source = flag_value, "flag"
        elif option.env is not None and option.env in env:
            raw, source = env[option.env], "env"
        elif option.name in file_values:
            raw, source = file_values[option.name], "file"
        elif option.fallback_env is not None and option.fallback_env in env:
            raw, source = env[option.fallback_env], "fallback"
        else:
            raw, source = option.default, "default"
        values[option.name] = None if raw is None else _parse(option, raw, source)
        sources[option.name] = source
    url, label = values["state_url"], _source_label(STORE_OPTIONS[0], sources["state_url"])
    values["state_dir"], values["state_url"] = settle_state_url(
        str(values["state_dir"]), None if url is None else str(url), sources, label
    )
    stimulus = values["stimulus"]
    if isinstance(stimulus, str):
        stimulus = trim(stimulus)  # Unicode White_Space, as spec §2 defines trim
        values["stimulus"] = stimulus or None
    for name in (*RAW_SECRET_ENVS, BEARER_FALLBACK_ENV):
        if utf8_length(env.get(name, "")) is None:
            raise ConfigurationError(f"{name} is not valid UTF-8")
    raw_secrets = {name: Secret(env[name]) for name in RAW_SECRET_ENVS if env.get(name)}
    if "BRAMA_API_KEY" not in raw_secrets and env.get(BEARER_FALLBACK_ENV):
        raw_secrets["BRAMA_API_KEY"] = Secret(env[BEARER_FALLBACK_ENV])
    values["raw_secrets"] = raw_secrets
    values["log_level"] = env.get(LOG_ENV, "info")
    values["config_file"] = file_path
    values["ignored_config_file"] = ignored
    names = {field.name for field in fields(Settings)}
    return Settings(**{name: values[name] for name in names})  # type: ignore[arg-type]


def finite(value: float) -> bool:
    """Whether a float is neither NaN nor infinite."""
    return math.isfinite(value)


def inherited_environment() -> dict[str, str]:
    """A copy of the process environment, for a child being to inherit (spec §14)."""
    return dict(os.environ)
