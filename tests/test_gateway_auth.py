"""Request authentication: HMAC signing (spec §9.2), bearer, none, and the verifier."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from singularity.errors import BramaError, RetryClass
from singularity.gateway.auth import (
    Auth,
    Secret,
    body_sha256,
    hmac_headers,
    verify_hmac,
)

BODY = b'{"model":"m","messages":[]}'
BODY_SHA = "0bfcf1c873fe23e87366969117efdc24b95f341eb2f4abe10ae01e7a1f4994c6"
# Computed independently: printf … | openssl dgst -sha256 -hmac 's3cret'
SIGNATURE = "6fb3861b8ec9a37ffff0b318879586f9606b0c99da5a000e98c64f63262683d2"
NOW = 1_700_000_000


def _clock() -> float:
    return float(NOW)


def test_secret_never_shows_its_value() -> None:
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret)
    assert "hunter2" not in str(secret)
    assert "hunter2" not in f"{secret} {secret!r} {[secret]}"
    assert secret.reveal() == "hunter2"
    assert secret == Secret("hunter2")
    assert secret != Secret("hunter3")
    assert "hunter2" not in repr(Auth.hmac(secret))
    assert "sk-9f8e" not in repr(Auth.bearer("sk-9f8e"))


def test_hmac_headers_match_an_independent_vector() -> None:
    headers = hmac_headers(Secret("s3cret"), "agent-1", BODY, NOW)
    assert list(headers.items()) == [
        ("x-agent-id", "agent-1"),
        ("x-agent-timestamp", "1700000000"),
        ("x-agent-body-sha256", BODY_SHA),
        ("x-agent-signature", SIGNATURE),
    ]
    assert body_sha256(BODY) == BODY_SHA


def test_the_key_is_the_utf8_bytes_of_the_secret() -> None:
    headers = hmac_headers(Secret("klucz-zażółć"), "agent-1", BODY, NOW)
    assert (
        headers["x-agent-signature"]
        == "dd7477f7351ad53c47d17f0339a9f93482b7925e88231047aca9a9ed9da0cbdf"
    )


def test_post_headers_per_mode() -> None:
    assert Auth.none().post_headers("agent-1", BODY, NOW) == {"content-type": "application/json"}
    assert Auth.bearer("sk-1").post_headers("agent-1", BODY, NOW) == {
        "content-type": "application/json",
        "authorization": "Bearer sk-1",
    }
    signed = Auth.hmac("s3cret").post_headers("agent-1", BODY, NOW)
    assert list(signed) == [
        "content-type",
        "x-agent-id",
        "x-agent-timestamp",
        "x-agent-body-sha256",
        "x-agent-signature",
    ]
    assert signed["x-agent-signature"] == SIGNATURE
    both = Auth(hmac_secret=Secret("s3cret"), bearer_token=Secret("sk-1"))
    assert both.post_headers("agent-1", BODY, NOW) == {**signed, "authorization": "Bearer sk-1"}


def test_read_headers_carry_only_the_bearer_key() -> None:
    assert Auth.none().read_headers() == {}
    assert Auth.hmac("s3cret").read_headers() == {}
    assert Auth.bearer("sk-1").read_headers() == {"authorization": "Bearer sk-1"}


def test_modes() -> None:
    assert Auth.none().mode == "none"
    assert Auth.hmac("s").mode == "hmac"
    assert Auth.bearer("k").mode == "bearer"
    assert Auth(Secret("s"), Secret("k")).mode == "hmac+bearer"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Auth.hmac(""), "cannot initialize signer: HMAC secret is empty"),
        (
            lambda: Auth.bearer(""),
            "cannot initialize signer: API key must be non-empty printable ASCII",
        ),
        (
            lambda: Auth.bearer("sk\r\nx-evil: 1"),
            "cannot initialize signer: API key must be non-empty printable ASCII",
        ),
        (
            lambda: Auth.bearer("klucz-ż"),
            "cannot initialize signer: API key must be non-empty printable ASCII",
        ),
    ],
)
def test_unusable_credentials_are_permanent_signer_errors(build: object, message: str) -> None:
    with pytest.raises(BramaError) as caught:
        build()  # type: ignore[operator]
    assert caught.value.message == message
    assert caught.value.retry is RetryClass.PERMANENT
    assert str(caught.value) == f"brama: {message}"


def _signed(**overrides: str) -> dict[str, str]:
    headers = hmac_headers(Secret("s3cret"), "agent-1", BODY, NOW)
    headers.update(overrides)
    return headers


def _verify(headers: dict[str, str], body: bytes = BODY, **options: object) -> str:
    verdict = verify_hmac(headers, body, Secret("s3cret"), clock=_clock, **options)  # type: ignore[arg-type]
    return "ok" if verdict.ok else verdict.reason


def test_verifier_accepts_a_good_request() -> None:
    verdict = verify_hmac(_signed(), BODY, Secret("s3cret"), clock=_clock)
    assert verdict.ok
    assert verdict.agent_id == "agent-1"
    assert verdict.reason == ""


def test_verifier_header_names_are_case_insensitive() -> None:
    headers = {name.upper(): value for name, value in _signed().items()}
    assert _verify(headers) == "ok"


@pytest.mark.parametrize(
    "name", ["x-agent-id", "x-agent-timestamp", "x-agent-body-sha256", "x-agent-signature"]
)
def test_verifier_names_a_missing_header(name: str) -> None:
    headers = _signed()
    del headers[name]
    assert _verify(headers) == f"missing header {name}"
    assert _verify({**headers, name: ""}) == f"missing header {name}"


def test_verifier_refuses_duplicate_headers() -> None:
    headers = {**_signed(), "X-Agent-Signature": SIGNATURE}
    assert _verify(headers) == "duplicate header x-agent-signature"


def test_verifier_checks_the_agent_id_when_asked() -> None:
    assert _verify(_signed(), expected_agent_id="agent-1") == "ok"
    assert _verify(_signed(), expected_agent_id="agent-2") == "unknown agent id"


@pytest.mark.parametrize(
    "stamp", ["-1", "1.5", "1e9", " 1700000000", "\u0661\u0667\u0660\u0660", "9" * 21, "abc"]
)
def test_verifier_refuses_malformed_timestamps(stamp: str) -> None:
    assert (
        _verify(_signed(**{"x-agent-timestamp": stamp}))
        == "timestamp is not a decimal number of Unix seconds"
    )


@pytest.mark.parametrize(
    ("skew", "expected"),
    [(0, "ok"), (300, "ok"), (-300, "ok"), (301, "outside"), (-301, "outside")],
)
def test_verifier_window_is_inclusive_300_seconds(skew: int, expected: str) -> None:
    headers = hmac_headers(Secret("s3cret"), "agent-1", BODY, NOW + skew)
    result = _verify(headers)
    assert result == ("ok" if expected == "ok" else "timestamp outside the allowed window")


def test_verifier_window_is_configurable() -> None:
    headers = hmac_headers(Secret("s3cret"), "agent-1", BODY, NOW + 10)
    assert _verify(headers, window_seconds=5) == "timestamp outside the allowed window"


def test_verifier_refuses_a_tampered_body() -> None:
    assert _verify(_signed(), body=BODY + b" ") == "body hash does not match the body"


def test_verifier_refuses_a_body_hash_that_is_not_lowercase_hex() -> None:
    headers = _signed(**{"x-agent-body-sha256": BODY_SHA.upper()})
    assert _verify(headers) == "body hash is not 64 lowercase hexadecimal characters"


def test_verifier_refuses_a_recomputed_hash_without_the_secret() -> None:
    tampered = b'{"model":"other","messages":[]}'
    headers = _signed(**{"x-agent-body-sha256": body_sha256(tampered)})
    assert _verify(headers, body=tampered) == "signature does not match"


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        (SIGNATURE.upper(), "signature is not 64 lowercase hexadecimal characters"),
        (SIGNATURE[:-1], "signature is not 64 lowercase hexadecimal characters"),
        ("é" * 64, "signature is not 64 lowercase hexadecimal characters"),
        ("0" * 64, "signature does not match"),
    ],
)
def test_verifier_refuses_bad_signatures(signature: str, reason: str) -> None:
    assert _verify(_signed(**{"x-agent-signature": signature})) == reason


def test_verifier_refuses_another_secret() -> None:
    headers = hmac_headers(Secret("other"), "agent-1", BODY, NOW)
    assert _verify(headers) == "signature does not match"


def test_verifier_refuses_a_changed_agent_id() -> None:
    assert _verify(_signed(**{"x-agent-id": "agent-2"})) == "signature does not match"


@given(
    secret=st.text(min_size=1),
    agent_id=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.:", min_size=1),
    body=st.binary(),
    skew=st.integers(-300, 300),
)
def test_signing_and_verifying_agree(secret: str, agent_id: str, body: bytes, skew: int) -> None:
    headers = hmac_headers(Secret(secret), agent_id, body, NOW + skew)
    verdict = verify_hmac(headers, body, Secret(secret), clock=_clock)
    assert verdict.ok, verdict.reason
    assert verdict.agent_id == agent_id
