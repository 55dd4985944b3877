"""The fleet's connection to Temporal: plain on loopback, TLS (with a CA of the operator's
own, a server name, a client certificate, an API key) in production and Temporal Cloud.

The Temporal of these tests is the dev server behind a TLS terminator of the tests' own
(`tests.support.tls`), certificates from a CA made for each test: a worker and the `fleet`
commands reach it only over TLS, and a client that cannot check its certificate, or
lacks the certificate the server asks for, is refused with a reason it can act on.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve_fleet
from singularity.errors import ConfigurationError, SecretFileError
from singularity.fleet.connection import TemporalConnection, connect
from singularity.fleet.dev import TemporalDevServer
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.fleet import SINGULARITY, WorkerProcess, check_life, dev_server, journal
from tests.support.polling import wait_for
from tests.support.tls import Authority, Issued, TlsTerminator

__all__ = ["dev_server"]
SERVER_NAME = "temporal.fleet.test"


def _connection(**fields: Any) -> TemporalConnection:
    return TemporalConnection(**fields)


def _secret(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def _refusal(connection: TemporalConnection) -> str:
    with pytest.raises(ConfigurationError) as refused:
        asyncio.run(connect(connection))
    return str(refused.value)


def _counts(connection: TemporalConnection) -> int:
    async def count() -> int:
        client = await connect(connection)
        return (await client.count_workflows()).count

    return asyncio.run(count())


# Options and their variables.


def test_the_default_connection_is_plain_grpc_on_loopback() -> None:
    connection = TemporalConnection.from_options(resolve_fleet({}, {}))
    assert connection == TemporalConnection("127.0.0.1:7233", "default")
    assert not connection.uses_tls
    assert connection.tls_config() is None
    assert connection.api_key() is None


def test_each_option_has_its_variable_and_a_flag_beats_it() -> None:
    environ = {
        "SINGULARITY_TEMPORAL": "ns.tmprl.cloud:7233",
        "SINGULARITY_TEMPORAL_NAMESPACE": "ns.acct",
        "SINGULARITY_TEMPORAL_TLS": "true",
        "SINGULARITY_TEMPORAL_CA_FILE": "/etc/ca.pem",
        "SINGULARITY_TEMPORAL_TLS_SERVER_NAME": "temporal.internal",
        "SINGULARITY_TEMPORAL_CERT_FILE": "/etc/client.pem",
        "SINGULARITY_TEMPORAL_KEY_FILE": "/etc/client.key",
        "SINGULARITY_TEMPORAL_API_KEY_FILE": "/etc/api-key",
    }
    from_env = TemporalConnection.from_options(resolve_fleet({}, environ))
    assert from_env == TemporalConnection(
        "ns.tmprl.cloud:7233",
        "ns.acct",
        tls=True,
        ca_file="/etc/ca.pem",
        cert_file="/etc/client.pem",
        key_file="/etc/client.key",
        api_key_file="/etc/api-key",
        server_name="temporal.internal",
    )
    flags = {"temporal": "t:1", "temporal_ca_file": "/here/ca.pem", "temporal_tls": True}
    mixed = TemporalConnection.from_options(resolve_fleet(flags, environ))
    assert (mixed.target, mixed.ca_file, mixed.namespace) == ("t:1", "/here/ca.pem", "ns.acct")
    assert "secret" not in mixed.describe() and "/etc/api-key" not in mixed.describe()
    assert mixed.describe() == "t:1 (TLS, client certificate, API key), namespace ns.acct"


def test_naming_a_tls_file_or_an_api_key_turns_tls_on() -> None:
    for named in ("ca_file", "api_key_file", "server_name"):
        assert _connection(**{named: "x"}).uses_tls, named
    assert _connection(cert_file="c", key_file="k").uses_tls
    assert _connection(tls=True).uses_tls
    assert _connection(tls=True).tls_config() is not None  # the system's authorities


def test_inconsistent_options_are_refused_before_any_connection() -> None:
    cases = {
        "--temporal-cert-file needs --temporal-key-file": {"cert_file": "c"},
        "--temporal-key-file needs --temporal-cert-file": {"key_file": "k"},
        "--temporal-ca-file needs TLS, which SINGULARITY_TEMPORAL_TLS=false turns off": {
            "tls": False,
            "ca_file": "ca.pem",
        },
        "--temporal-api-key-file needs TLS": {"tls": False, "api_key_file": "key"},
        "--temporal-tls-server-name must not be empty": {"server_name": " "},
    }
    for message, fields in cases.items():
        with pytest.raises(ConfigurationError, match=message):
            _connection(**fields)
    with pytest.raises(ConfigurationError, match="SINGULARITY_TEMPORAL_TLS must be true or false"):
        resolve_fleet({}, {"SINGULARITY_TEMPORAL_TLS": "yes"})


def test_a_missing_unreadable_or_wrong_file_is_named(tmp_path: Path) -> None:
    authority = Authority(tmp_path)
    client = authority.issue("worker", client=True)
    missing = str(tmp_path / "missing.pem")
    assert _refusal(_connection(ca_file=missing)) == (
        f"configuration: --temporal-ca-file {missing}: No such file or directory (os error 2)"
    )
    assert _refusal(_connection(ca_file=str(tmp_path))).startswith(
        f"configuration: --temporal-ca-file {tmp_path}: Is a directory"
    )
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("a certificate, surely\n")
    assert _refusal(_connection(ca_file=str(not_pem))) == (
        f"configuration: --temporal-ca-file {not_pem}: not a PEM certificate"
    )
    pair = {"cert_file": str(client.cert_file)}
    a_cert = _secret(tmp_path / "cert-as.key", client.cert_file.read_text())
    assert _refusal(_connection(**pair, key_file=str(a_cert))) == (
        f"configuration: --temporal-key-file {a_cert}: not a PEM private key"
    )
    assert _refusal(_connection(cert_file=str(client.key_file), key_file=str(client.key_file))) == (
        f"configuration: --temporal-cert-file {client.key_file}: not a PEM certificate"
    )
    client.key_file.chmod(0o644)
    with pytest.raises(SecretFileError, match="must not be group/world accessible"):
        asyncio.run(connect(_connection(**pair, key_file=str(client.key_file))))
    empty = _secret(tmp_path / "api-key", "\n")
    with pytest.raises(SecretFileError, match="is empty"):
        asyncio.run(connect(_connection(api_key_file=str(empty))))


def test_a_wrong_option_fails_the_command_with_its_reason() -> None:
    for command in (["fleet", "list"], ["worker", "--state-url", "/nowhere"]):
        done = subprocess.run(
            [SINGULARITY, *command, "--temporal-cert-file", "/etc/client.pem"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, (command, done.stderr)
        assert done.stdout == ""
        assert "--temporal-cert-file needs --temporal-key-file" in done.stderr, done.stderr


# A real Temporal behind TLS.


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    folder = tmp_path / "tls"
    folder.mkdir()
    return Authority(folder)


@pytest.fixture
def tls_temporal(dev_server: TemporalDevServer, authority: Authority) -> Iterator[TlsTerminator]:
    """The dev server reachable over TLS only, its certificate for SERVER_NAME."""
    with TlsTerminator(dev_server.port, authority.issue(SERVER_NAME)).running() as terminator:
        yield terminator


def test_a_client_that_trusts_the_servers_authority_connects(
    tls_temporal: TlsTerminator, authority: Authority, tmp_path: Path
) -> None:
    ca = str(authority.ca_file)
    assert (
        _counts(_connection(target=tls_temporal.target, ca_file=ca, server_name=SERVER_NAME)) == 0
    )
    key = _secret(tmp_path / "api-key", "a-cloud-key\n")

    async def with_key() -> str | None:
        connection = _connection(
            target=tls_temporal.target, ca_file=ca, server_name=SERVER_NAME, api_key_file=str(key)
        )
        client = await connect(connection)
        await client.count_workflows()
        return client.api_key

    assert asyncio.run(with_key()) == "a-cloud-key"


def test_a_client_that_cannot_check_the_certificate_is_told_why(
    tls_temporal: TlsTerminator, authority: Authority
) -> None:
    target = tls_temporal.target
    untrusted = _refusal(_connection(target=target, tls=True, server_name=SERVER_NAME))
    assert untrusted.startswith(
        f"configuration: cannot reach Temporal at {target} (TLS), namespace default; "
        "no authority it trusts signed the server's certificate (--temporal-ca-file"
    ), untrusted
    assert "UnknownIssuer" in untrusted
    misnamed = _refusal(_connection(target=target, ca_file=str(authority.ca_file)))
    assert "(--temporal-tls-server-name names the one it holds)" in misnamed, misnamed
    plain = _refusal(_connection(target=target))
    assert f"cannot reach Temporal at {target}, namespace default; " in plain
    assert "(TLS? --temporal-tls)" in plain, plain


def test_a_server_that_asks_for_a_client_certificate_gets_it(
    dev_server: TemporalDevServer, authority: Authority
) -> None:
    client = authority.issue("worker", client=True)
    server = authority.issue(SERVER_NAME)
    with TlsTerminator(dev_server.port, server, client_ca=authority.ca_file).running() as mtls:
        trusting = {"target": mtls.target, "ca_file": str(authority.ca_file)}
        trusting["server_name"] = SERVER_NAME
        anonymous = _refusal(_connection(**trusting))
        assert "(a client certificate? --temporal-cert-file and --temporal-key-file)" in anonymous
        pair = {"cert_file": str(client.cert_file), "key_file": str(client.key_file)}
        assert _counts(_connection(**trusting, **pair)) == 0


def test_a_fleet_lives_behind_mutual_tls(
    tmp_path: Path,
    dev_server: TemporalDevServer,
    authority: Authority,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker configured by variables and the `fleet` commands by flags reach Temporal
    only through mutual TLS; the being lives as in a home lab."""
    root = tmp_path / "beings"
    worker_pair = authority.issue("worker", client=True)
    operator_pair = authority.issue("operator", client=True)
    server = authority.issue(SERVER_NAME)
    with (
        TlsTerminator(dev_server.port, server, client_ca=authority.ca_file).running() as mtls,
        ScriptedServer([], default=Turn.text("secure")) as gateway,
    ):
        _tls_environment(monkeypatch, authority, worker_pair)
        flags = ["--brama-url", gateway.url, "--cycle-interval-secs", "3600"]
        worker = WorkerProcess(mtls.target, root, flags, tmp_path / "worker.log")
        monkeypatch.delenv("SINGULARITY_TEMPORAL_CERT_FILE")
        monkeypatch.delenv("SINGULARITY_TEMPORAL_KEY_FILE")
        operator = [
            "--temporal", mtls.target,
            "--temporal-ca-file", str(authority.ca_file),
            "--temporal-tls-server-name", SERVER_NAME,
            "--temporal-cert-file", str(operator_pair.cert_file),
            "--temporal-key-file", str(operator_pair.key_file),
        ]  # fmt: skip
        try:
            assert _fleet(operator, "start", "ada", "--set", "starting_balance=1")["key"] == "ada"
            wait_for(
                lambda: _fleet(operator, "show", "ada")["cycles"] >= 1,
                "a cycle over TLS",
                interval=0.5,
            )
            shown = _fleet(operator, "show", "ada")
            assert (shown["status"], shown["worker"]) == ("running", worker.name)
            _fleet(operator, "stop", "ada")
            wait_for(
                lambda: _fleet(operator, "show", "ada")["status"] == "stopped",
                "the stop",
                interval=0.5,
            )
        finally:
            worker.stop()
    assert "TLS, client certificate" in (tmp_path / "worker.log").read_text()
    events = journal(root / "ada" / "state")
    assert check_life(events) == []
    assert events[-1]["type"] == "stopped"


def _tls_environment(monkeypatch: pytest.MonkeyPatch, authority: Authority, pair: Issued) -> None:
    monkeypatch.setenv("SINGULARITY_TEMPORAL_CA_FILE", str(authority.ca_file))
    monkeypatch.setenv("SINGULARITY_TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
    monkeypatch.setenv("SINGULARITY_TEMPORAL_CERT_FILE", str(pair.cert_file))
    monkeypatch.setenv("SINGULARITY_TEMPORAL_KEY_FILE", str(pair.key_file))


def _fleet(connection: list[str], *arguments: str) -> Any:
    done = subprocess.run(
        [SINGULARITY, "fleet", *arguments, *connection],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
