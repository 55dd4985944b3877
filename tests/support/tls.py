"""TLS for the tests: a certificate authority of their own and a TLS terminator.

`Authority` makes a CA and issues server and client certificates with the `cryptography`
package (PEM files in a folder, keys owner-only). `TlsTerminator` listens on a loopback
port, speaks TLS there (HTTP/2 by ALPN, as gRPC wants; optionally requiring a client
certificate the CA issued) and relays the plain bytes to a server behind it, such as the
Temporal dev server: a Temporal reachable only through TLS, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CHUNK = 65536
VALID = datetime.timedelta(days=2)
WAIT_SECS = 120.0
"""A hang detector for the relay's loop and for a TLS handshake, which on a loaded machine
can take far longer than its usual milliseconds."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, as PEM files."""

    cert_file: Path
    key_file: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


class Authority:
    """A certificate authority for one test, its files in `folder`."""

    def __init__(self, folder: Path, common: str = "Test CA") -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(_name(common))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = folder / f"{common.replace(' ', '-').lower()}.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, client: bool = False) -> Issued:
        """A certificate for `name` (a DNS name or an IP address): a server's, or a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alternative: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            alternative = x509.DNSName(name)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + VALID)
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        stem = f"{'client' if client else 'server'}-{name}"
        cert_file, key_file = self.folder / f"{stem}.pem", self.folder / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_file, key)
        return Issued(cert_file, key_file)


class TlsTerminator:
    """TLS on a loopback port in front of a plain TCP server (a thread with its own loop)."""

    def __init__(self, upstream_port: int, server: Issued, client_ca: Path | None = None) -> None:
        self.upstream_port = upstream_port
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(server.cert_file, server.key_file)
        self.context.set_alpn_protocols(["h2"])
        if client_ca is not None:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(client_ca)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._relays: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def target(self) -> str:
        """HOST:PORT of the TLS side."""
        return f"127.0.0.1:{self.port}"

    @contextlib.contextmanager
    def running(self) -> Iterator[TlsTerminator]:
        """Listen until the block ends."""
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(
            WAIT_SECS
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(WAIT_SECS)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(WAIT_SECS)
            self._loop.close()

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(
            self._relay, "127.0.0.1", 0, ssl=self.context, ssl_handshake_timeout=WAIT_SECS
        )

    async def _close(self) -> None:
        """Stop listening and cut every relay (aborted, not cancelled: each ends by itself)."""
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await asyncio.gather(*self._relays, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        relay = asyncio.current_task()
        assert relay is not None
        self._relays.add(relay)
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._relays.discard(relay)
            self._writers.difference_update((writer, up_writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the reading side ends, then end the writing side."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass  # the peer went away: the relay ends
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
