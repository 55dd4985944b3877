"""The journal's keys: a 0600 keyring file, AES-256-GCM sealing, rotation and shredding.

Each entry is sealed under the current key with a fresh random 96-bit nonce. The
additional data binds the journal (so, the being), the entry id, its creation time and
the key id, so a ciphertext moved to another row or another being fails authentication.
The keyring names the being it serves by a fingerprint of its identity and birth time,
never by a path: a moved, copied or restored state directory keeps its journal, while
another being (a child that inherited `SINGULARITY_JOURNAL_KEY_FILE`) must not use it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import stat
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from singularity.journal.records import JournalError, Row, to_micros

# `cryptography` is imported where it is used: a being that never journals never loads it.
from singularity.storage import fsio
from singularity.timestamps import parse_timestamp, render_timestamp

KEY_FILE = "journal.key"
FORMAT = "singularity-journal-keys/1"
TEMP_PREFIX = ".journal-key-"
AAD_PREFIX = b"singularity-journal/1\x00"
VECTOR_AAD_PREFIX = b"singularity-journal-vector/1\x00"
NONCE_BYTES = 12
TAG_BYTES = 16
# A sealed text is padded to the smallest of these sizes that holds it, so the length of
# a ciphertext tells only the bucket, not the length of the entry. The last one holds the
# longest entry (4096 bytes) with its 5-byte header.
PAD_BUCKETS = (128, 256, 512, 1024, 2048, 4101)
PADDED = b"\x01"  # never the first byte of an older, unpadded text (no control characters)
MAX_KEY_FILE_BYTES = 1 << 20


class Unreadable(Exception):
    """An entry failed authentication (or its key is gone); no text was produced."""


class ForeignKeyFile(JournalError):
    """The key file serves another being."""


def being_fingerprint(identity: dict[str, object], started_at: str) -> str:
    """Who a being is, for its keyring: a digest of its identity fields and birth time."""
    document = json.dumps(
        {"identity": identity, "started_at": started_at}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


@dataclass
class Key:
    """One AES-256 key and when it was made."""

    id: str
    secret: bytes = field(repr=False)
    created_at: datetime


def pad(text: str) -> bytes:
    """The text as UTF-8 behind a 5-byte header, padded with zeros to its bucket."""
    data = text.encode("utf-8")
    framed = PADDED + len(data).to_bytes(4, "big") + data
    bucket = next((size for size in PAD_BUCKETS if size >= len(framed)), len(framed))
    return framed + bytes(bucket - len(framed))


def unpad(data: bytes) -> str:
    """The text of a padded plaintext (an older entry's plaintext is its text as is)."""
    if not data.startswith(PADDED):
        return data.decode("utf-8")
    size = int.from_bytes(data[1:5], "big")
    if size > len(data) - 5:
        raise ValueError("bad padding")
    return data[5 : 5 + size].decode("utf-8")


def _aad(
    journal_id: str, entry_id: str, created_at: datetime, key_id: str, prefix: bytes = AAD_PREFIX
) -> bytes:
    return (
        prefix
        + uuid.UUID(journal_id).bytes
        + uuid.UUID(entry_id).bytes
        + to_micros(created_at).to_bytes(8, "big", signed=True)
        + key_id.encode("ascii")
    )


@dataclass
class Keyring:
    """The keys of one journal; the current one seals, any held one opens."""

    path: str
    journal_id: str
    being: str
    current: str
    keys: dict[str, Key]

    def seal(self, entry_id: str, created_at: datetime, text: str) -> tuple[bytes, bytes, str]:
        """Encrypt under the current key: (nonce, ciphertext with tag, key id)."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self.keys[self.current]
        nonce = os.urandom(NONCE_BYTES)
        aad = _aad(self.journal_id, entry_id, created_at, key.id)
        return nonce, AESGCM(key.secret).encrypt(nonce, pad(text), aad), key.id

    def open(self, row: Row) -> str:
        """Authenticate and decrypt a row, or raise `Unreadable`."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self.keys.get(row.key_id)
        if key is None or len(row.nonce) != NONCE_BYTES:
            raise Unreadable(row.id)
        try:
            aad = _aad(self.journal_id, row.id, row.created_at, row.key_id)
            return unpad(AESGCM(key.secret).decrypt(row.nonce, row.ciphertext, aad))
        except (InvalidTag, ValueError):
            raise Unreadable(row.id) from None

    def seal_vector(self, entry_id: str, created_at: datetime, key_id: str, data: bytes) -> bytes:
        """Encrypt a vector's bytes under the row's key: nonce, then ciphertext with tag."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self.keys[key_id]
        nonce = os.urandom(NONCE_BYTES)
        aad = _aad(self.journal_id, entry_id, created_at, key_id, VECTOR_AAD_PREFIX)
        return nonce + AESGCM(key.secret).encrypt(nonce, data, aad)

    def open_vector(self, entry_id: str, created_at: datetime, key_id: str, sealed: bytes) -> bytes:
        """A vector's bytes from `seal_vector`, or `Unreadable`."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self.keys.get(key_id)
        if key is None or len(sealed) < NONCE_BYTES + TAG_BYTES:
            raise Unreadable(entry_id)
        aad = _aad(self.journal_id, entry_id, created_at, key_id, VECTOR_AAD_PREFIX)
        try:
            return AESGCM(key.secret).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
        except InvalidTag:
            raise Unreadable(entry_id) from None

    def add_key(self, now: datetime) -> str:
        """Make a new current key and save the keyring (the old keys stay until dropped)."""
        key = Key(secrets.token_hex(8), secrets.token_bytes(32), now)
        self.keys[key.id] = key
        self.current = key.id
        self.save()
        return key.id

    def drop_keys(self, keep: set[str]) -> list[str]:
        """Destroy every key but the current one and those in `keep`; save if any went."""
        gone = [kid for kid in self.keys if kid != self.current and kid not in keep]
        for kid in gone:
            del self.keys[kid]
        if gone:
            self.save()
        return gone

    def save(self) -> None:
        """Durably replace the key file (0600)."""
        document = {
            "format": FORMAT,
            "journal_id": self.journal_id,
            "being": self.being,
            "current": self.current,
            "keys": [
                {
                    "id": key.id,
                    "key": base64.b64encode(key.secret).decode("ascii"),
                    "created_at": render_timestamp(key.created_at),
                }
                for key in self.keys.values()
            ],
        }
        data = json.dumps(document, indent=2).encode("ascii") + b"\n"
        directory, name = os.path.split(os.path.abspath(self.path))
        dir_fd = fsio.open_dir(directory)
        try:
            fsio.replace_file(dir_fd, name, data, temp_prefix=TEMP_PREFIX, point="journal-key")
        finally:
            os.close(dir_fd)

    def destroy(self) -> None:
        """Crypto-shred: delete the key file, so no stored ciphertext can be opened again."""
        directory, name = os.path.split(os.path.abspath(self.path))
        dir_fd = fsio.open_dir(directory)
        try:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            fsio.fsync_dir(dir_fd, "journal-key")
        finally:
            os.close(dir_fd)
        self.keys.clear()


def key_path(state_dir: str, configured: str | None) -> str:
    """The key file: the configured one, else `<state-dir>/journal.key`."""
    return configured if configured else os.path.join(state_dir, KEY_FILE)


def load_keyring(
    path: str, being: str, state_dir: str, now: datetime, *, create: bool
) -> Keyring | None:
    """Read the keyring, or make one when allowed; None when it is missing and not created."""
    _remove_stale_temps(path)
    try:
        data = _read_private(path)
    except FileNotFoundError:
        if not create:
            return None
        ring = Keyring(path, str(uuid.uuid4()), being, "", {})
        ring.add_key(now)
        return ring
    ring, legacy_home = _parse(path, data)
    if legacy_home is not None:
        # An older keyring named a state directory. It is this being's when it names this
        # directory, or when it lies in it (the directory moved); then it names the being.
        home = os.path.realpath(state_dir)
        if home not in (legacy_home, os.path.dirname(os.path.realpath(path))):
            raise ForeignKeyFile(f"key file {path} serves another being")
        ring.being = being
        ring.save()
    if ring.being != being:
        raise ForeignKeyFile(f"key file {path} serves another being")
    return ring


def read_key_file(path: str) -> bytes:
    """The key file's bytes, as written (it must be this user's, 0600, a regular file)."""
    return _read_private(path)


def _read_private(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JournalError(f"key file {path} is not a regular file")
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise JournalError(f"key file {path} must be owned by this user with mode 0600")
        return os.read(fd, MAX_KEY_FILE_BYTES)
    finally:
        os.close(fd)


def _parse(path: str, data: bytes) -> tuple[Keyring, str | None]:
    """The keyring, and the state directory an older keyring names instead of its being."""
    try:
        document = json.loads(data)
        if document.get("format") != FORMAT:
            raise ValueError("unknown format")
        keys = {
            item["id"]: Key(
                item["id"], base64.b64decode(item["key"]), parse_timestamp(item["created_at"])
            )
            for item in document["keys"]
        }
        legacy = document.get("state_dir") if "being" not in document else None
        being = "" if legacy is not None else str(document["being"])
        if legacy is not None and not isinstance(legacy, str):
            raise ValueError("bad state directory")
        ring = Keyring(path, document["journal_id"], being, document["current"], keys)
        uuid.UUID(ring.journal_id)
        if ring.current not in keys or any(len(key.secret) != 32 for key in keys.values()):
            raise ValueError("inconsistent keys")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise JournalError(f"key file {path} is not a journal keyring") from None
    return ring, legacy


def _remove_stale_temps(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(TEMP_PREFIX) and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def key_texts(path: str) -> list[str]:
    """The keys of the keyring at `path` as the file writes them (base64), and in hex, so the
    runtime can withhold them from everything else it writes; none when it cannot be read."""
    try:
        document = json.loads(_read_private(path))
        keys = [item["key"] for item in document["keys"]]
        return [text for key in keys for text in (key, base64.b64decode(key).hex())]
    except (OSError, JournalError, ValueError, KeyError, TypeError, RecursionError):
        return []
