"""The configuration checks of spec §3.2 and the secret files of §3.3.

Contract: the checks run in the spec's order and the first failure is reported with
its exact message (`configuration: …` or `secret file: …`, exit 2); decision 5
replaces step 12 (HMAC secret, bearer key, none for a loopback gateway); the Las
checks 6-8 apply only when an entrypoint is configured (decision 18).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.errors import ConfigurationError, FatalIoError, SecretFileError, SingularityError
from singularity.secrets import Secret, os_error_text, read_secret_file
from singularity.settings_check import Credentials, canonical_workspace, check_runtime


@dataclass(frozen=True)
class Files:
    """Paths a check can point at."""

    root: Path
    workspace: Path
    entrypoint: Path
    manifest: Path
    signature: Path
    trust: Path
    watermark: Path
    good_secret: Path
    open_secret: Path
    empty_secret: Path


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Files:
    monkeypatch.chdir(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    las = tmp_path / "las"
    las.mkdir()
    paths = {name: las / name for name in ("mcp.mjs", "manifest", "signature", "trust")}
    for path in paths.values():
        path.write_text("x", encoding="utf-8")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    good = _secret(secrets / "good", b"s3cret\n", 0o600)
    wide = _secret(secrets / "wide", b"s3cret\n", 0o644)
    empty = _secret(secrets / "empty", b"\r\n", 0o600)
    return Files(
        root=tmp_path,
        workspace=workspace,
        entrypoint=paths["mcp.mjs"],
        manifest=paths["manifest"],
        signature=paths["signature"],
        trust=paths["trust"],
        watermark=las / "watermark-not-yet-written",
        good_secret=good,
        open_secret=wide,
        empty_secret=empty,
    )


def _secret(path: Path, data: bytes, mode: int) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _check(
    files: Files, flags: dict[str, object], env: dict[str, str] | None = None
) -> Credentials:
    merged: dict[str, object | None] = {"workspace": str(files.workspace), **flags}
    return check_runtime(resolve(merged, environ=env or {}))


def _failure(files: Files, flags: dict[str, object], env: dict[str, str] | None = None) -> str:
    with pytest.raises(SingularityError) as caught:
        _check(files, flags, env)
    assert isinstance(caught.value, ConfigurationError | SecretFileError)
    assert caught.value.exit_code == 2
    return str(caught.value)


def _las(files: Files, **overrides: str) -> dict[str, object]:
    flags: dict[str, object] = {
        "las_entrypoint": str(files.entrypoint),
        "las_release_manifest": str(files.manifest),
        "las_release_manifest_signature": str(files.signature),
        "las_release_trust_store": str(files.trust),
        "las_release_watermark": str(files.watermark),
    }
    flags.update(overrides)
    return flags


# --- the happy paths -------------------------------------------------------------------


def test_defaults_pass_with_no_credential_for_the_loopback_gateway(files: Files) -> None:
    credentials = _check(files, {})
    assert credentials == Credentials(None, None, None)
    assert credentials.brama_mode == "none"


def test_full_las_configuration_passes(files: Files) -> None:
    _check(files, _las(files))


def test_las_checks_are_skipped_without_an_entrypoint(files: Files) -> None:
    flags = _las(files, las_release_manifest="relative", las_release_watermark="relative")
    del flags["las_entrypoint"]
    _check(files, flags)


def test_canonical_workspace_resolves_symlinks(files: Files) -> None:
    link = files.root / "ws-link"
    link.symlink_to(files.workspace)
    assert canonical_workspace(str(link)) == os.path.realpath(files.workspace)
    _check(files, {"workspace": str(link)})


# --- each message, byte for byte -------------------------------------------------------

IDENTIFIER_LABELS = [
    ("agent_id", "agent id"),
    ("role", "role"),
    ("environment", "environment"),
    ("host", "host"),
    ("workload_id", "workload id"),
]
HEX_LABELS = [
    ("workload_public_key", "workload public key"),
    ("executable_digest", "executable digest"),
    ("code_digest", "code digest"),
    ("policy_digest", "policy digest"),
]


@pytest.mark.parametrize("stimulus", ["a\x00b", "x" * 65537, "\u00e9" * 32768 + "x"])
def test_step_1_stimulus(files: Files, stimulus: str) -> None:
    assert _failure(files, {"stimulus": stimulus}) == (
        "configuration: stimulus must be at most 65536 bytes and contain no NUL"
    )


@pytest.mark.parametrize("stimulus", ["x" * 65536, "\u00e9" * 32768, "  " + "y" * 65536 + "\n"])
def test_step_1_stimulus_at_the_bound(files: Files, stimulus: str) -> None:
    _check(files, {"stimulus": stimulus})


def test_step_2_missing_workspace_reports_the_os_error(files: Files) -> None:
    missing = files.root / "no-such-dir"
    assert _failure(files, {"workspace": str(missing)}) == (
        "configuration: workspace: No such file or directory (os error 2)"
    )


def test_step_2_the_default_workspace_of_a_new_being_may_not_exist_yet(files: Files) -> None:
    assert not (files.root / "workspace").exists()
    check_runtime(resolve({}, environ={}))  # decision 24: it is created at birth
    assert not (files.root / "workspace").exists()  # but not by a check
    with pytest.raises(ConfigurationError) as caught:
        check_runtime(resolve({"resume": True}, environ={}))
    assert str(caught.value) == "configuration: workspace: No such file or directory (os error 2)"


def test_step_2_workspace_under_a_file_reports_the_os_error(files: Files) -> None:
    below_file = files.entrypoint / "sub"
    assert _failure(files, {"workspace": str(below_file)}) == (
        "configuration: workspace: Not a directory (os error 20)"
    )


def test_step_2_workspace_must_be_a_directory(files: Files) -> None:
    assert _failure(files, {"workspace": str(files.entrypoint)}) == (
        "configuration: workspace must be a directory"
    )


def test_os_error_text_format() -> None:
    assert os_error_text(FileNotFoundError(2, "No such file or directory")) == (
        "No such file or directory (os error 2)"
    )
    assert os_error_text(OSError(13, "Permission denied", "/x")) == (
        "Permission denied (os error 13)"
    )


@pytest.mark.parametrize("rounds", ["0"])
def test_step_3_rounds(files: Files, rounds: str) -> None:
    assert _failure(files, {"max_tool_rounds": rounds}) == (
        "configuration: max tool rounds must be positive"
    )


@pytest.mark.parametrize(
    "option", ["starting_balance", "instance_price", "input_price", "output_price"]
)
def test_step_4_negative_money(files: Files, option: str) -> None:
    assert _failure(files, {option: "-0.01"}) == (
        "configuration: prices and balance cannot be negative"
    )


def test_step_4_zero_money_is_accepted(files: Files) -> None:
    _check(files, {"starting_balance": "0", "input_price": "0.000", "output_price": "-0"})


@pytest.mark.parametrize("temperature", ["-0.1", "2.0001", "nan", "inf", "-inf"])
def test_step_5_temperature(files: Files, temperature: str) -> None:
    assert _failure(files, {"temperature": temperature}) == (
        "configuration: temperature must be finite and between zero and two"
    )


@pytest.mark.parametrize("temperature", ["0", "2", "0.2"])
def test_step_5_temperature_bounds_accepted(files: Files, temperature: str) -> None:
    _check(files, {"temperature": temperature})


def test_step_6_entrypoint_not_found(files: Files) -> None:
    missing = str(files.root / "las" / "missing.mjs")
    assert _failure(files, _las(files, las_entrypoint=missing)) == (
        f"configuration: LAS entrypoint not found: {missing}"
    )


def test_step_6_entrypoint_directory_is_not_found(files: Files) -> None:
    directory = str(files.root / "las")
    assert _failure(files, _las(files, las_entrypoint=directory)) == (
        f"configuration: LAS entrypoint not found: {directory}"
    )


@pytest.mark.parametrize(
    ("option", "label"),
    [
        ("las_release_manifest", "LAS release manifest"),
        ("las_release_manifest_signature", "LAS release manifest signature"),
        ("las_release_trust_store", "LAS release trust store"),
    ],
)
@pytest.mark.parametrize("problem", ["relative", "missing", "directory"])
def test_step_7_release_files(files: Files, option: str, label: str, problem: str) -> None:
    value = {
        "relative": "las/manifest",  # exists relative to the cwd, but is not absolute
        "missing": str(files.root / "las" / "absent"),
        "directory": str(files.root / "las"),
    }[problem]
    assert _failure(files, _las(files, **{option: value})) == (
        f"configuration: {label} must be an absolute regular file"
    )


def test_step_7_release_files_unset(files: Files) -> None:
    assert _failure(files, {"las_entrypoint": str(files.entrypoint)}) == (
        "configuration: LAS release manifest must be an absolute regular file"
    )


def test_step_7_order_manifest_signature_trust_store(files: Files) -> None:
    assert (
        _failure(
            files, _las(files, las_release_manifest_signature="x", las_release_trust_store="y")
        )
        == "configuration: LAS release manifest signature must be an absolute regular file"
    )


@pytest.mark.parametrize("watermark", ["relative/watermark", ""])
def test_step_8_watermark(files: Files, watermark: str) -> None:
    assert _failure(files, _las(files, las_release_watermark=watermark)) == (
        "configuration: LAS release watermark must be an absolute path"
    )


def test_step_8_watermark_unset(files: Files) -> None:
    flags = _las(files)
    del flags["las_release_watermark"]
    assert _failure(files, flags) == (
        "configuration: LAS release watermark must be an absolute path"
    )


@pytest.mark.parametrize(("option", "label"), IDENTIFIER_LABELS)
@pytest.mark.parametrize("value", ["", "has space", "x" * 129, "local\n", "caf\u00e9", "a/b"])
def test_step_9_identifiers(files: Files, option: str, label: str, value: str) -> None:
    assert _failure(files, {option: value}) == (
        f"configuration: {label} is not a valid immutable identifier"
    )


@pytest.mark.parametrize(("option", "_label"), IDENTIFIER_LABELS)
def test_step_9_identifier_alphabet_and_length_accepted(
    files: Files, option: str, _label: str
) -> None:
    _check(files, {option: "aZ09-_.:" + "x" * 120})


def test_step_9_order(files: Files) -> None:
    assert _failure(files, {"workload_id": "bad id", "role": "bad role"}) == (
        "configuration: role is not a valid immutable identifier"
    )


@pytest.mark.parametrize(("option", "label"), HEX_LABELS)
@pytest.mark.parametrize("value", ["", "0" * 63, "0" * 65, "A" * 64, "g" * 64, "0" * 64 + "\n"])
def test_step_10_hex(files: Files, option: str, label: str, value: str) -> None:
    assert _failure(files, {option: value}) == (
        f"configuration: {label} must be 64 lowercase hexadecimal characters"
    )


def test_step_10_order(files: Files) -> None:
    assert _failure(files, {"policy_digest": "x", "executable_digest": "y"}) == (
        "configuration: executable digest must be 64 lowercase hexadecimal characters"
    )


URL_FAILURES = [
    ("not a url", "{var}: relative URL without a base"),
    ("http://", "{var}: empty host"),
    ("http://example.com:99999/", "{var}: invalid port number"),
    ("http://example.com:port/", "{var}: invalid port number"),
    ("http://[::1/", "{var}: invalid IPv6 address"),
    ("ftp://example.com/", "{var} must use http or https"),
    ("file:///etc/passwd", "{var} must use http or https"),
]


@pytest.mark.parametrize(("url", "template"), URL_FAILURES)
def test_step_11_brama_url(files: Files, url: str, template: str) -> None:
    expected = "configuration: " + template.format(var="BRAMA_BASE_URL")
    assert _failure(files, {"brama_url": url}) == expected


@pytest.mark.parametrize(("url", "template"), URL_FAILURES)
def test_step_13_most_url_is_always_checked(files: Files, url: str, template: str) -> None:
    expected = "configuration: " + template.format(var="MOST_BASE_URL")
    assert _failure(files, {"most_url": url}) == expected


# --- step 12: gateway credentials (decision 5) ------------------------------------------

NO_CREDENTIAL = (
    "configuration: a non-loopback BRAMA_BASE_URL needs a credential: BRAMA_HMAC_SECRET_FILE, "
    "WISENT_APP_AGENT_AUTH_SECRET, BRAMA_API_KEY_FILE, BRAMA_API_KEY or OPENAI_API_KEY"
)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8081", "http://127.8.9.10/", "http://localhost:1/", "https://[::1]:8/"],
)
def test_step_12_loopback_needs_no_credential(files: Files, url: str) -> None:
    assert _check(files, {"brama_url": url}).brama_mode == "none"


@pytest.mark.parametrize(
    "url", ["https://api.example.com/", "http://10.0.0.1:8081", "http://localhost.example/"]
)
def test_step_12_non_loopback_without_credential(files: Files, url: str) -> None:
    assert _failure(files, {"brama_url": url}) == NO_CREDENTIAL


def test_step_12_hmac_secret_file(files: Files) -> None:
    credentials = _check(
        files,
        {"brama_url": "https://api.example.com/", "brama_secret_file": str(files.good_secret)},
    )
    assert credentials.brama_mode == "hmac"
    assert credentials.brama_secret == Secret("s3cret")


def test_step_12_hmac_secret_from_the_environment(files: Files) -> None:
    credentials = _check(
        files, {"brama_url": "https://x.example/"}, {"WISENT_APP_AGENT_AUTH_SECRET": "raw"}
    )
    assert (credentials.brama_mode, credentials.brama_secret) == ("hmac", Secret("raw"))


def test_step_12_bearer_key_file(files: Files) -> None:
    credentials = _check(
        files, {"brama_url": "https://x.example/"}, {"BRAMA_API_KEY_FILE": str(files.good_secret)}
    )
    assert (credentials.brama_mode, credentials.brama_api_key) == ("bearer", Secret("s3cret"))


def test_step_12_bearer_key_from_the_environment(files: Files) -> None:
    credentials = _check(files, {"brama_url": "https://x.example/"}, {"BRAMA_API_KEY": "sk-1"})
    assert (credentials.brama_mode, credentials.brama_api_key) == ("bearer", Secret("sk-1"))


def test_step_12_openai_conventions_reach_an_openai_server(files: Files) -> None:
    env = {"OPENAI_BASE_URL": "https://api.openai.com/v1", "OPENAI_API_KEY": "sk-o"}
    credentials = _check(files, {}, env)
    assert (credentials.brama_mode, credentials.brama_api_key) == ("bearer", Secret("sk-o"))
    file_key = env | {"BRAMA_API_KEY_FILE": str(files.good_secret)}
    assert _check(files, {}, file_key).brama_api_key == Secret("s3cret")


def test_the_tool_choice_is_one_of_openais_words(files: Files) -> None:
    for choice in ("auto", "required", "none"):
        _check(files, {"brama_tool_choice": choice})
    assert _failure(files, {"brama_tool_choice": "always"}) == (
        "configuration: BRAMA_TOOL_CHOICE must be auto, required or none"
    )


def test_step_12_hmac_and_bearer_are_both_used(files: Files) -> None:
    credentials = _check(
        files,
        {"brama_secret_file": str(files.good_secret)},
        {"BRAMA_API_KEY": "sk-1", "BRAMA_API_KEY_FILE": str(files.good_secret)},
    )
    assert credentials.brama_mode == "hmac+bearer"
    assert (credentials.brama_secret, credentials.brama_api_key) == (
        Secret("s3cret"),
        Secret("s3cret"),
    )
    raw = _check(files, {}, {"WISENT_APP_AGENT_AUTH_SECRET": "raw", "BRAMA_API_KEY": "sk-1"})
    assert (raw.brama_secret, raw.brama_api_key) == (Secret("raw"), Secret("sk-1"))


def test_step_12_a_loopback_gateway_still_uses_a_configured_credential(files: Files) -> None:
    assert _check(files, {}, {"BRAMA_API_KEY": "sk-1"}).brama_mode == "bearer"


def test_step_12_secret_file_problems_are_secret_file_errors(files: Files) -> None:
    assert _failure(files, {"brama_secret_file": str(files.open_secret)}) == (
        f"secret file: {files.open_secret} must not be group/world accessible"
    )
    assert _failure(files, {"brama_api_key_file": str(files.empty_secret)}) == (
        f"secret file: {files.empty_secret} is empty"
    )


def test_step_14_most_token(files: Files) -> None:
    credentials = _check(files, {"most_token_file": str(files.good_secret)})
    assert credentials.most_token == Secret("s3cret")
    missing = str(files.root / "absent-token")
    assert _failure(files, {"most_token_file": missing}) == (
        f"secret file: not a regular file: {missing}"
    )


# --- the order of the steps ------------------------------------------------------------


def _breakers(files: Files) -> list[tuple[dict[str, object], str]]:
    """For each step 1..14, flags that break only that step, and the step's message."""
    good_las = _las(files)
    return [
        (
            {"stimulus": "nul\x00"},
            "configuration: stimulus must be at most 65536 bytes and contain no NUL",
        ),
        (
            {"workspace": str(files.root / "missing-ws")},
            "configuration: workspace: No such file or directory (os error 2)",
        ),
        ({"max_tool_rounds": "0"}, "configuration: max tool rounds must be positive"),
        ({"output_price": "-1"}, "configuration: prices and balance cannot be negative"),
        (
            {"temperature": "2.5"},
            "configuration: temperature must be finite and between zero and two",
        ),
        (
            {"las_entrypoint": str(files.root / "nope.mjs")},
            f"configuration: LAS entrypoint not found: {files.root / 'nope.mjs'}",
        ),
        (
            {"las_entrypoint": str(files.entrypoint), "las_release_manifest": "rel"},
            "configuration: LAS release manifest must be an absolute regular file",
        ),
        (
            {**good_las, "las_release_watermark": "rel"},
            "configuration: LAS release watermark must be an absolute path",
        ),
        ({"host": "bad host"}, "configuration: host is not a valid immutable identifier"),
        (
            {"code_digest": "F" * 64},
            "configuration: code digest must be 64 lowercase hexadecimal characters",
        ),
        (
            {"brama_url": "gopher://example.com/"},
            "configuration: BRAMA_BASE_URL must use http or https",
        ),
        (
            {"brama_secret_file": str(files.open_secret)},
            f"secret file: {files.open_secret} must not be group/world accessible",
        ),
        ({"most_url": "ws://example.com/"}, "configuration: MOST_BASE_URL must use http or https"),
        (
            {"most_token_file": str(files.empty_secret)},
            f"secret file: {files.empty_secret} is empty",
        ),
    ]


def test_each_breaker_alone_reports_its_own_step(files: Files) -> None:
    for flags, message in _breakers(files):
        assert _failure(files, flags) == message


def test_the_earlier_of_two_broken_steps_is_reported(files: Files) -> None:
    breakers = _breakers(files)
    assert len(breakers) == 14
    for (early, message), (late, _) in itertools.combinations(breakers, 2):
        combined = {**late, **early}  # the earlier step's values win where both set one
        assert _failure(files, combined) == message, (early, late)


def test_all_steps_broken_reports_step_1(files: Files) -> None:
    combined: dict[str, object] = {}
    for flags, _ in reversed(_breakers(files)):
        combined.update(flags)
    assert _failure(files, combined) == (
        "configuration: stimulus must be at most 65536 bytes and contain no NUL"
    )


# --- secret files (§3.3) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"abc", "abc"),
        (b"abc\n", "abc"),
        (b"abc\r\n\r\n\n", "abc"),
        (b" \n", " "),
        (b"\tkey\t\n", "\tkey\t"),
        (b"abc\n \n", "abc\n "),
        (b"line1\nline2\n", "line1\nline2"),
        ("z\u00f3\u0142w\n".encode(), "z\u00f3\u0142w"),
    ],
)
def test_secret_value_strips_only_trailing_cr_lf(tmp_path: Path, data: bytes, value: str) -> None:
    path = _secret(tmp_path / "s", data, 0o600)
    assert read_secret_file(str(path)).value == value


@pytest.mark.parametrize("data", [b"", b"\n", b"\r\n", b"\r", b"\n\r\n\r"])
def test_secret_empty_after_stripping(tmp_path: Path, data: bytes) -> None:
    path = _secret(tmp_path / "s", data, 0o600)
    with pytest.raises(SecretFileError) as caught:
        read_secret_file(str(path))
    assert str(caught.value) == f"secret file: {path} is empty"
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o610, 0o601, 0o620, 0o602, 0o644, 0o777])
def test_secret_group_or_world_bits_refused(tmp_path: Path, mode: int) -> None:
    path = _secret(tmp_path / "s", b"value\n", mode)
    with pytest.raises(SecretFileError) as caught:
        read_secret_file(str(path))
    assert str(caught.value) == f"secret file: {path} must not be group/world accessible"


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_secret_owner_only_modes_accepted(tmp_path: Path, mode: int) -> None:
    path = _secret(tmp_path / "s", b"value\n", mode)
    assert read_secret_file(str(path)).value == "value"


def test_secret_not_a_regular_file(tmp_path: Path) -> None:
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for path in (directory, fifo, dangling, tmp_path / "missing"):
        with pytest.raises(SecretFileError) as caught:
            read_secret_file(str(path))
        assert str(caught.value) == f"secret file: not a regular file: {path}"
        assert caught.value.exit_code == 2


def test_secret_symlink_to_a_private_regular_file_is_followed(tmp_path: Path) -> None:
    target = _secret(tmp_path / "target", b"linked\n", 0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    os.chmod(tmp_path, 0o755)
    assert read_secret_file(str(link)).value == "linked"


def test_secret_symlink_to_a_shared_file_is_refused(tmp_path: Path) -> None:
    target = _secret(tmp_path / "target", b"linked\n", 0o644)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(SecretFileError) as caught:
        read_secret_file(str(link))
    assert str(caught.value) == f"secret file: {link} must not be group/world accessible"


def test_secret_not_utf8_is_an_io_error(tmp_path: Path) -> None:
    path = _secret(tmp_path / "s", b"\xff\xfe\n", 0o600)
    with pytest.raises(FatalIoError) as caught:
        read_secret_file(str(path))
    assert caught.value.exit_code == 4


def test_secret_value_never_shows_in_repr_or_str(tmp_path: Path) -> None:
    secret = read_secret_file(str(_secret(tmp_path / "s", b"canary-123\n", 0o600)))
    assert "canary-123" not in repr(secret)
    assert "canary-123" not in str(secret)
    credentials = Credentials(secret, secret, secret)
    assert "canary-123" not in repr(credentials)


def test_error_classes_exit_codes() -> None:
    assert ConfigurationError("x").exit_code == 2
    assert SecretFileError("x").exit_code == 2
    assert str(ConfigurationError("x")) == "configuration: x"
    assert str(SecretFileError("x")) == "secret file: x"
