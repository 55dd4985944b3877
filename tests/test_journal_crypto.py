"""The journal's keyring: AES-256-GCM sealing, the key file, rotation and shredding."""

from __future__ import annotations

import json
import os
import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from singularity.journal.embedders import HashingEmbedder
from singularity.journal.keyring import (
    KEY_FILE,
    ForeignKeyFile,
    Keyring,
    Unreadable,
    load_keyring,
)
from singularity.journal.opening import open_journal
from singularity.journal.records import JournalError, Row
from tests.support.journal import config_of

NOW = datetime(2026, 5, 1, 8, 30, 15, 250000, tzinfo=UTC)


def _ring(tmp_path: Path, name: str = "being") -> Keyring:
    state = tmp_path / name
    state.mkdir(mode=0o700, exist_ok=True)
    ring = load_keyring(str(state / KEY_FILE), name, str(state), NOW, create=True)
    assert ring is not None
    return ring


def _sealed(ring: Keyring, text: str = "a private thought") -> Row:
    entry_id = str(uuid.uuid4())
    nonce, ciphertext, key_id = ring.seal(entry_id, NOW, text)
    return Row(entry_id, NOW, ciphertext, nonce, key_id)


def test_the_key_file_is_private_and_outside_the_state_file(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    info = os.stat(ring.path)
    assert stat.S_IMODE(info.st_mode) == 0o600
    document = json.loads(Path(ring.path).read_text())
    assert document["being"] == "being" and "state_dir" not in document
    assert len(document["keys"]) == 1 and not (tmp_path / "being" / "state.json").exists()


def test_round_trip_and_fresh_nonces(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    rows = [_sealed(ring, "same words") for _ in range(20_000)]
    assert len({row.nonce for row in rows}) == len(rows)
    assert len({row.ciphertext for row in rows}) == len(rows)
    assert ring.open(rows[0]) == "same words"


def test_every_nonce_bit_matters(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    row = _sealed(ring)
    for bit in range(96):
        nonce = bytearray(row.nonce)
        nonce[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(Unreadable):
            ring.open(Row(row.id, row.created_at, row.ciphertext, bytes(nonce), row.key_id))


@settings(max_examples=200)
@given(data=st.data())
def test_any_ciphertext_or_tag_bit_flip_fails(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    ring = _ring(tmp_path_factory.mktemp("flip"))
    row = _sealed(ring, data.draw(st.text(min_size=0, max_size=64)))
    bit = data.draw(st.integers(0, len(row.ciphertext) * 8 - 1))
    cipher = bytearray(row.ciphertext)
    cipher[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(Unreadable):
        ring.open(Row(row.id, row.created_at, bytes(cipher), row.nonce, row.key_id))


def test_bound_fields_and_other_beings(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    row = _sealed(ring)
    moved = Row(str(uuid.uuid4()), row.created_at, row.ciphertext, row.nonce, row.key_id)
    later = Row(
        row.id, row.created_at.replace(microsecond=250001), row.ciphertext, row.nonce, row.key_id
    )
    for bad in (moved, later):
        with pytest.raises(Unreadable):
            ring.open(bad)
    ring.add_key(NOW)
    with pytest.raises(Unreadable):
        ring.open(Row(row.id, row.created_at, row.ciphertext, row.nonce, ring.current))
    other = _ring(tmp_path, "other")
    other.keys = dict(ring.keys)  # same key material, other journal id
    with pytest.raises(Unreadable):
        other.open(row)


def test_a_loose_or_corrupt_key_file_is_refused(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    os.chmod(ring.path, 0o640)
    with pytest.raises(JournalError, match="mode 0600"):
        load_keyring(ring.path, "being", str(tmp_path / "being"), NOW, create=True)
    os.chmod(ring.path, 0o600)
    Path(ring.path).write_text('{"format": "something else"}')
    with pytest.raises(JournalError, match="not a journal keyring"):
        load_keyring(ring.path, "being", str(tmp_path / "being"), NOW, create=True)


def test_a_child_that_inherits_the_key_file_makes_its_own(tmp_path: Path) -> None:
    shared = tmp_path / "keys"
    shared.mkdir(mode=0o700)
    key_file = str(shared / "parent.key")
    parent_dir, child_dir = tmp_path / "parent", tmp_path / "child"
    for directory in (parent_dir, child_dir):
        directory.mkdir(mode=0o700)
    parent = open_journal(config_of(parent_dir, key_file=key_file), embedder=HashingEmbedder())
    assert parent is not None and parent.keyring.path == key_file
    with pytest.raises(ForeignKeyFile):
        load_keyring(key_file, "child", str(child_dir), NOW, create=True)
    child = open_journal(config_of(child_dir, key_file=key_file), embedder=HashingEmbedder())
    assert child is not None
    assert child.keyring.path == str(child_dir / KEY_FILE)
    assert child.keyring.journal_id != parent.keyring.journal_id
    parent.close()
    child.close()


def test_destroy_shreds(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    row = _sealed(ring)
    ring.destroy()
    assert not os.path.exists(ring.path)
    with pytest.raises(Unreadable):
        ring.open(row)
    assert load_keyring(ring.path, "being", str(tmp_path / "being"), NOW, create=False) is None


def test_an_older_keyring_that_named_its_directory_is_adopted(tmp_path: Path) -> None:
    ring = _ring(tmp_path)
    document = json.loads(Path(ring.path).read_text())
    document["state_dir"] = "/where/the/being/lived/before"
    del document["being"]
    Path(ring.path).write_text(json.dumps(document))
    # In its own (moved) directory it is this being's, and names the being from then on.
    adopted = load_keyring(ring.path, "fingerprint", str(tmp_path / "being"), NOW, create=False)
    assert adopted is not None and adopted.journal_id == ring.journal_id
    assert json.loads(Path(ring.path).read_text())["being"] == "fingerprint"
    # Configured from elsewhere, naming another directory, it is another being's.
    document["state_dir"] = "/another/being"
    Path(ring.path).write_text(json.dumps(document))
    (tmp_path / "other").mkdir(mode=0o700)
    with pytest.raises(ForeignKeyFile):
        load_keyring(ring.path, "fingerprint", str(tmp_path / "other"), NOW, create=False)
