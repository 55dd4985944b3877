"""Configuration resolution (spec §3.1, decisions 1 and 2).

Contract: every option comes from a flag, an environment variable, the TOML config file
or its default, in that order of precedence; with nothing given, a being can start
(local identity defaults); bad values are configuration errors (exit 2) naming the
source they came from.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.config import ALL_OPTIONS, Settings, resolve
from singularity.errors import ConfigurationError

ZEROS = "0" * 64


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty directory, so no stray `singularity.toml` is picked up."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def _toml(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def _config_error(
    flags: dict[str, object | None] | None = None,
    env: dict[str, str] | None = None,
    config_file: str | None = None,
) -> str:
    with pytest.raises(ConfigurationError) as caught:
        resolve(flags or {}, config_file=config_file, environ=env or {})
    assert caught.value.exit_code == 2
    return str(caught.value)


# --- defaults --------------------------------------------------------------------------


def test_no_flags_at_all_gives_the_local_defaults() -> None:
    settings = resolve({}, environ={})
    assert settings.agent_id == "local"
    assert settings.agent_name == "MyAgent"
    assert settings.agent_ticker == "AGENT"
    assert settings.agent_type == "general"
    assert settings.specialty == "general"
    assert settings.role == "being"
    assert settings.environment == "local"
    assert settings.host == "localhost"
    assert settings.workload_id == "local"
    assert settings.workload_public_key == ZEROS
    assert settings.executable_digest == ZEROS
    assert settings.code_digest == ZEROS
    assert settings.policy_digest == ZEROS
    assert settings.policy_sequence == 0
    assert type(settings.policy_sequence) is int


def test_no_flags_at_all_gives_the_spec_defaults_of_the_other_options() -> None:
    settings = resolve({}, environ={})
    assert settings.stimulus is None
    assert settings.starting_balance == Decimal("10")
    assert isinstance(settings.starting_balance, Decimal)
    assert str(settings.starting_balance) == "10"
    assert settings.instance_price == Decimal(0)
    assert settings.input_price == Decimal(0)
    assert settings.output_price == Decimal(0)
    assert settings.cycle_interval_secs == 5
    assert settings.max_tool_rounds == 8
    assert settings.state_dir == ".singularity"
    assert settings.workspace == "workspace"  # decision 24: beside .singularity
    assert settings.resume is False
    assert settings.brama_url == "http://127.0.0.1:8081"
    assert settings.brama_model == "any"
    assert settings.brama_secret_file is None
    assert settings.max_tokens == 2048
    assert settings.temperature == 0.2
    assert settings.http_timeout_secs == 120
    assert settings.las_command == "node"
    assert settings.las_entrypoint is None  # decision 18: no default entrypoint
    assert settings.required_surface_list == []  # decision 18: no required surfaces
    assert settings.most_url == "http://127.0.0.1:8080"
    assert settings.most_token_file is None
    assert settings.mcp_timeout_secs == 120
    assert settings.shutdown_grace_secs == 10
    assert settings.raw_secrets == {}
    assert settings.config_file is None


def test_every_option_has_a_distinct_flag_variable_and_settings_field() -> None:
    names = [option.name for option in ALL_OPTIONS]
    envs = [option.env for option in ALL_OPTIONS if option.env is not None]
    assert len(set(names)) == len(names)
    assert len(set(envs)) == len(envs)
    settings_fields = set(Settings.__dataclass_fields__)
    assert set(names) <= settings_fields
    for option in ALL_OPTIONS:
        assert option.flag == "--" + option.name.replace("_", "-")


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("agent_id", "SINGULARITY_AGENT_ID"),
        ("executable_digest", "SINGULARITY_EXECUTABLE_SHA256"),
        ("starting_balance", "SINGULARITY_STARTING_BALANCE_USD"),
        ("input_price", "BRAMA_INPUT_PRICE_USD_PER_MILLION"),
        ("brama_url", "BRAMA_BASE_URL"),
        ("brama_secret_file", "BRAMA_HMAC_SECRET_FILE"),
        ("las_entrypoint", "LAS_MCP_ENTRYPOINT"),
        ("most_token_file", "MOST_SERVICE_TOKEN_FILE"),
        ("resume", "SINGULARITY_RESUME"),
    ],
)
def test_variable_names_are_the_spec_ones(name: str, env: str) -> None:
    assert {option.name: option.env for option in ALL_OPTIONS}[name] == env


# --- precedence ------------------------------------------------------------------------

# (option, env variable, TOML literal, file value, env text, env value, flag, flag value)
PRECEDENCE = [
    (
        "agent_name",
        "SINGULARITY_AGENT_NAME",
        '"FileName"',
        "FileName",
        "EnvName",
        "EnvName",
        "FlagName",
        "FlagName",
    ),
    (
        "host",
        "SINGULARITY_HOST",
        '"file-host"',
        "file-host",
        "env-host",
        "env-host",
        "flag-host",
        "flag-host",
    ),
    ("max_tool_rounds", "SINGULARITY_MAX_TOOL_ROUNDS", "3", 3, "4", 4, "5", 5),
    ("policy_sequence", "SINGULARITY_POLICY_SEQUENCE", "7", 7, "8", 8, "9", 9),
    (
        "starting_balance",
        "SINGULARITY_STARTING_BALANCE_USD",
        '"1.50"',
        Decimal("1.50"),
        "2.25",
        Decimal("2.25"),
        "3.125",
        Decimal("3.125"),
    ),
    (
        "output_price",
        "BRAMA_OUTPUT_PRICE_USD_PER_MILLION",
        "0.5",
        Decimal("0.5"),
        "0.75",
        Decimal("0.75"),
        "1",
        Decimal("1"),
    ),
    ("temperature", "BRAMA_TEMPERATURE", "0.5", 0.5, "0.75", 0.75, "1.25", 1.25),
    ("cycle_interval_secs", "SINGULARITY_CYCLE_INTERVAL_SECS", "1", 1.0, "2.5", 2.5, "0", 0.0),
]


@pytest.mark.parametrize(
    ("name", "env", "literal", "file_value", "env_text", "env_value", "flag", "flag_value"),
    PRECEDENCE,
)
def test_flag_beats_env_beats_file_beats_default(
    tmp_path: Path,
    name: str,
    env: str,
    literal: str,
    file_value: object,
    env_text: str,
    env_value: object,
    flag: str,
    flag_value: object,
) -> None:
    config = _toml(tmp_path / "c.toml", f"{name} = {literal}\n")
    default = getattr(resolve({}, environ={}), name)
    assert default not in (file_value, env_value, flag_value)

    from_file = getattr(resolve({}, config_file=config, environ={}), name)
    from_env = getattr(resolve({}, config_file=config, environ={env: env_text}), name)
    from_flag = getattr(resolve({name: flag}, config_file=config, environ={env: env_text}), name)

    assert (from_file, from_env, from_flag) == (file_value, env_value, flag_value)
    assert type(from_file) is type(file_value)
    assert type(from_env) is type(env_value)
    assert type(from_flag) is type(flag_value)


def test_bool_precedence(tmp_path: Path) -> None:
    on = _toml(tmp_path / "on.toml", "resume = true\n")
    off = _toml(tmp_path / "off.toml", "resume = false\n")
    assert resolve({}, environ={}).resume is False
    assert resolve({}, config_file=on, environ={}).resume is True
    assert resolve({}, config_file=on, environ={"SINGULARITY_RESUME": "false"}).resume is False
    assert resolve({}, config_file=off, environ={"SINGULARITY_RESUME": "true"}).resume is True
    flagged = resolve({"resume": True}, config_file=off, environ={"SINGULARITY_RESUME": "false"})
    assert flagged.resume is True


def test_a_flag_given_as_none_means_not_given() -> None:
    settings = resolve({"agent_id": None}, environ={"SINGULARITY_AGENT_ID": "from-env"})
    assert settings.agent_id == "from-env"


def test_only_the_given_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SINGULARITY_AGENT_ID", "from-process-env")
    assert resolve({}, environ={}).agent_id == "local"
    assert resolve({}).agent_id == "from-process-env"


def test_raw_secrets_come_only_from_the_environment_and_empty_ones_are_ignored() -> None:
    settings = resolve(
        {}, environ={"WISENT_APP_AGENT_AUTH_SECRET": "hmac-value", "BRAMA_API_KEY": ""}
    )
    assert set(settings.raw_secrets) == {"WISENT_APP_AGENT_AUTH_SECRET"}
    secret = settings.raw_secrets["WISENT_APP_AGENT_AUTH_SECRET"]
    assert getattr(secret, "value", secret) == "hmac-value"
    assert "hmac-value" not in repr(settings)


# --- OpenAI's conventions (decision 22) ------------------------------------------------


def test_openai_base_url_is_the_lowest_priority_source_of_the_gateway_url(tmp_path: Path) -> None:
    openai = {"OPENAI_BASE_URL": "https://api.openai.com/v1"}
    assert resolve({}, environ=openai).brama_url == "https://api.openai.com/v1"
    both = openai | {"BRAMA_BASE_URL": "http://127.0.0.1:9/"}
    assert resolve({}, environ=both).brama_url == "http://127.0.0.1:9/"
    config = _toml(tmp_path / "c.toml", 'brama_url = "http://file.example/"\n')
    assert resolve({}, config_file=config, environ=openai).brama_url == "http://file.example/"
    flag = {"brama_url": "http://flag.example/"}
    assert resolve(flag, environ=openai).brama_url == "http://flag.example/"


def test_openai_api_key_is_the_last_fallback_of_the_bearer_key() -> None:
    settings = resolve({}, environ={"OPENAI_API_KEY": "sk-openai"})
    assert set(settings.raw_secrets) == {"BRAMA_API_KEY"}
    assert settings.raw_secrets["BRAMA_API_KEY"].value == "sk-openai"
    both = resolve({}, environ={"OPENAI_API_KEY": "sk-openai", "BRAMA_API_KEY": "sk-brama"})
    assert both.raw_secrets["BRAMA_API_KEY"].value == "sk-brama"
    assert resolve({}, environ={"OPENAI_API_KEY": ""}).raw_secrets == {}
    assert "sk-openai" not in repr(settings)


def test_environment_values_reproduce_the_settings() -> None:
    original = resolve(
        {
            "agent_id": "a-1",
            "starting_balance": "12.50",
            "temperature": "0.7",
            "resume": True,
            "stimulus": "look around",
            "policy_sequence": "42",
        },
        environ={},
    )
    again = resolve({}, environ=original.environment_values())
    assert again == original


# --- the TOML file ---------------------------------------------------------------------


def test_config_file_argument(tmp_path: Path) -> None:
    config = _toml(tmp_path / "c.toml", 'agent_id = "from-file"\nmax_tokens = 99\n')
    settings = resolve({}, config_file=config, environ={})
    assert settings.agent_id == "from-file"
    assert settings.max_tokens == 99
    assert settings.config_file == config


def test_singularity_config_variable(tmp_path: Path) -> None:
    config = _toml(tmp_path / "c.toml", 'role = "from-variable"\n')
    settings = resolve({}, environ={"SINGULARITY_CONFIG": config})
    assert settings.role == "from-variable"
    assert settings.config_file == config


def test_config_argument_beats_the_variable(tmp_path: Path) -> None:
    chosen = _toml(tmp_path / "chosen.toml", 'role = "chosen"\n')
    other = _toml(tmp_path / "other.toml", 'role = "other"\n')
    settings = resolve({}, config_file=chosen, environ={"SINGULARITY_CONFIG": other})
    assert settings.role == "chosen"


def test_default_config_file_in_the_working_directory() -> None:
    Path("singularity.toml").write_text('specialty = "weaving"\n', encoding="utf-8")
    settings = resolve({}, environ={})
    assert settings.specialty == "weaving"
    assert settings.config_file == "singularity.toml"


def test_explicit_config_file_replaces_the_default_one(tmp_path: Path) -> None:
    Path("singularity.toml").write_text('specialty = "default-file"\n', encoding="utf-8")
    config = _toml(tmp_path / "c.toml", 'agent_type = "explicit"\n')
    settings = resolve({}, config_file=config, environ={})
    assert settings.agent_type == "explicit"
    assert settings.specialty == "general"


def test_unknown_key_in_the_file_is_refused(tmp_path: Path) -> None:
    config = _toml(tmp_path / "c.toml", 'agent_id = "x"\nagent_idd = "typo"\n')
    message = _config_error(config_file=config)
    assert message == f"configuration: config file {config}: unknown option agent_idd"


@pytest.mark.parametrize("key", ["raw_secrets", "log_level", "config_file"])
def test_internal_settings_cannot_be_set_from_the_file(tmp_path: Path, key: str) -> None:
    config = _toml(tmp_path / "c.toml", f'{key} = "x"\n')
    assert _config_error(config_file=config).endswith(f": unknown option {key}")


def test_missing_config_file_is_a_configuration_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.toml")
    message = _config_error(config_file=missing)
    assert message == f"configuration: config file {missing}: No such file or directory"


def test_invalid_toml_is_a_configuration_error(tmp_path: Path) -> None:
    config = _toml(tmp_path / "c.toml", "agent_id = \n")
    assert _config_error(config_file=config).startswith(f"configuration: config file {config}: ")


def test_file_value_of_the_wrong_type_names_the_key(tmp_path: Path) -> None:
    config = _toml(tmp_path / "c.toml", "agent_id = 5\n")
    assert _config_error(config_file=config) == "configuration: agent_id must be a string"
    config = _toml(tmp_path / "d.toml", "max_tool_rounds = 2.5\n")
    assert _config_error(config_file=config) == (
        "configuration: max_tool_rounds must be a non-negative integer"
    )
    config = _toml(tmp_path / "e.toml", 'resume = "yes"\n')
    assert _config_error(config_file=config) == "configuration: resume must be true or false"


def test_file_numbers_keep_their_decimal_value(tmp_path: Path) -> None:
    config = _toml(tmp_path / "c.toml", "starting_balance = 0.1\ninput_price = 3\n")
    settings = resolve({}, config_file=config, environ={})
    assert settings.starting_balance == Decimal("0.1")
    assert settings.input_price == Decimal(3)


# --- bad values ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["TRUE", "True", "1", "0", "yes", "", " true", "true\n"])
def test_bool_variable_must_be_true_or_false(text: str) -> None:
    message = _config_error(env={"SINGULARITY_RESUME": text})
    assert message == "configuration: SINGULARITY_RESUME must be true or false"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "-1",
        "1.5",
        "1e3",
        " 7",
        "7 ",
        "1_000",
        "\u0663",
        "\uff17",
        "0x10",
        "18446744073709551616",
    ],
)
def test_integer_variable_must_be_a_plain_unsigned_integer(text: str) -> None:
    message = _config_error(env={"SINGULARITY_POLICY_SEQUENCE": text})
    assert message == "configuration: SINGULARITY_POLICY_SEQUENCE must be a non-negative integer"


def test_integer_bounds() -> None:
    top = resolve({}, environ={"SINGULARITY_POLICY_SEQUENCE": "18446744073709551615"})
    assert top.policy_sequence == 2**64 - 1
    assert resolve({}, environ={"SINGULARITY_MAX_TOOL_ROUNDS": "0"}).max_tool_rounds == 0


def test_integer_flag_error_names_the_flag() -> None:
    message = _config_error(flags={"max_tool_rounds": "many"})
    assert message == "configuration: --max-tool-rounds must be a non-negative integer"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ten",
        "NaN",
        "Infinity",
        "1_0",
        " 1",
        "1 ",
        "\u0661",
        "0x10",
        "1e2",
        "1.2.3",
    ],
)
def test_decimal_variable_must_be_a_plain_decimal(text: str) -> None:
    message = _config_error(env={"SINGULARITY_STARTING_BALANCE_USD": text})
    assert message == "configuration: SINGULARITY_STARTING_BALANCE_USD must be a decimal number"


@pytest.mark.parametrize(
    "text", ["0.00000000000000000000000000001", "79228162514264337593543950336", "1" + "0" * 61]
)
def test_money_must_be_in_the_money_range(text: str) -> None:
    message = _config_error(env={"SINGULARITY_STARTING_BALANCE_USD": text})
    assert message == (
        "configuration: SINGULARITY_STARTING_BALANCE_USD must be at most "
        "79228162514264337593543950335 in absolute value with at most 28 decimal places"
    )


def test_the_edges_of_the_money_range_are_accepted() -> None:
    top = resolve({"starting_balance": "79228162514264337593543950335"}, environ={})
    assert str(top.starting_balance) == "79228162514264337593543950335"
    finest = resolve({"input_price": "0.0000000000000000000000000001"}, environ={})
    assert format(finest.input_price, "f") == "0.0000000000000000000000000001"
    # Trailing zeros beyond the 28th place change nothing.
    padded = resolve({"output_price": "0.100000000000000000000000000000"}, environ={})
    assert format(padded.output_price, "f") == "0.1000000000000000000000000000"


def test_max_tokens_is_an_unsigned_32_bit_number() -> None:
    assert resolve({"max_tokens": "4294967295"}, environ={}).max_tokens == 4294967295
    for text in ("4294967296", "-1", "18446744073709551615"):
        assert _config_error(flags={"max_tokens": text}) == (
            "configuration: --max-tokens must be an integer from 0 to 4294967295"
        )
    assert _config_error(env={"BRAMA_MAX_TOKENS": "4294967296"}) == (
        "configuration: BRAMA_MAX_TOKENS must be an integer from 0 to 4294967295"
    )


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("10", "10"),
        ("10.50", "10.50"),
        (".5", "0.5"),
        ("0.0000027777777777777777777778", "0.0000027777777777777777777778"),
        ("79228162514264337593543950335", "79228162514264337593543950335"),
        ("-1", "-1"),  # parsed; refused later by the §3.2 check with its own message
    ],
)
def test_decimal_variable_is_exact(text: str, rendered: str) -> None:
    settings = resolve({}, environ={"BRAMA_INPUT_PRICE_USD_PER_MILLION": text})
    assert isinstance(settings.input_price, Decimal)
    assert format(settings.input_price, "f") == rendered


@pytest.mark.parametrize("text", ["", "hot", "1_0", " 1", "\u0661", "0x1", "--1"])
def test_number_variable_must_be_a_number(text: str) -> None:
    message = _config_error(env={"BRAMA_TEMPERATURE": text})
    assert message == "configuration: BRAMA_TEMPERATURE must be a number"


def test_non_finite_numbers_parse_and_are_left_to_the_range_check() -> None:
    assert resolve({}, environ={"BRAMA_TEMPERATURE": "nan"}).temperature != 0.2
    assert resolve({}, environ={"BRAMA_TEMPERATURE": "inf"}).temperature == float("inf")


# --- stimulus --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  hello world \n", "hello world"),
        ("\t\u3000look\u2003\u00a0", "look"),
        ("a \n b", "a \n b"),
        ("", None),
        ("   ", None),
        ("\r\n\t\u2028", None),
        # U+001F and U+200B are not White_Space: trim keeps them (spec §2).
        ("\x1fx", "\x1fx"),
        ("\u200b", "\u200b"),
    ],
)
def test_stimulus_is_trimmed_and_empty_means_unset(raw: str, expected: str | None) -> None:
    assert resolve({"stimulus": raw}, environ={}).stimulus == expected
    assert resolve({}, environ={"SINGULARITY_STIMULUS": raw}).stimulus == expected


def test_unset_stimulus_is_none() -> None:
    assert resolve({}, environ={}).stimulus is None


def test_settings_are_frozen() -> None:
    settings = resolve({}, environ={})
    with pytest.raises(AttributeError):
        settings.agent_id = "changed"  # type: ignore[misc]


def test_resolve_does_not_touch_the_process_environment() -> None:
    before = dict(os.environ)
    resolve({"agent_id": "x"}, environ={"SINGULARITY_HOST": "h"})
    assert dict(os.environ) == before
