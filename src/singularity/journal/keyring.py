"""The journal's keys: a 0600 keyring file, AES-256-GCM sealing, rotation and shredding.

Each entry is sealed under the current key with a fresh random 96-bit nonce. The
additional data binds the journal (so, the being), the entry id, its creation time and
the key id, so a ciphertext moved to another row or another being fails authentication.
The keyring names the state directory it serves: a being whose state directory differs
(a child that inherited `SINGULARITY_JOURNAL_KEY_FILE`) must not use it.
"""

from __future__ import annotations

import base64
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
NONCE_BYTES = 12
MAX_KEY_FILE_BYTES = 1 << 20


class Unreadable(Exception):
    """An entry failed authentication (or its key is gone); no text was produced."""


class ForeignKeyFile(JournalError):
    """The key file serves another state directory."""


@dataclass
class Key:
    """One AES-256 key and when it was made."""

    id: str
    secret: bytes = field(repr=False)
    created_at: datetime


def _aad(journal_id: str, entry_id: str, created_at: datetime, key_id: str) -> bytes:
    return (
        AAD_PREFIX
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
    state_dir: str
    current: str
    keys: dict[str, Key]

    def seal(self, entry_id: str, created_at: datetime, text: str) -> tuple[bytes, bytes, str]:
        """Encrypt under the current key: (nonce, ciphertext with tag, key id)."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self.keys[self.current]
        nonce = os.urandom(NONCE_BYTES)
        aad = _aad(self.journal_id, entry_id, created_at, key.id)
        return nonce, AESGCM(key.secret).encrypt(nonce, text.encode("utf-8"), aad), key.id

    def open(self, row: Row) -> str:
        """Authenticate and decrypt a row, or raise `Unreadable`."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self.keys.get(row.key_id)
        if key is None or len(row.nonce) != NONCE_BYTES:
            raise Unreadable(row.id)
        try:
            aad = _aad(self.journal_id, row.id, row.created_at, row.key_id)
            data = AESGCM(key.secret).decrypt(row.nonce, row.ciphertext, aad)
            return data.decode("utf-8")
        except (InvalidTag, ValueError):
            raise Unreadable(row.id) from None

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
            "state_dir": self.state_dir,
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


def load_keyring(path: str, state_dir: str, now: datetime, *, create: bool) -> Keyring | None:
    """Read the keyring, or make one when allowed; None when it is missing and not created."""
    home = os.path.realpath(state_dir)
    _remove_stale_temps(path)
    try:
        data = _read_private(path)
    except FileNotFoundError:
        if not create:
            return None
        ring = Keyring(path, str(uuid.uuid4()), home, "", {})
        ring.add_key(now)
        return ring
    ring = _parse(path, data)
    if ring.state_dir != home:
        raise ForeignKeyFile(f"key file {path} serves another state directory")
    return ring


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


def _parse(path: str, data: bytes) -> Keyring:
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
        ring = Keyring(
            path, document["journal_id"], document["state_dir"], document["current"], keys
        )
        uuid.UUID(ring.journal_id)
        if ring.current not in keys or any(len(key.secret) != 32 for key in keys.values()):
            raise ValueError("inconsistent keys")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise JournalError(f"key file {path} is not a journal keyring") from None
    return ring


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
