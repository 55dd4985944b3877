"""The funding grant a parent leaves in a child's state directory (decision 17).

The parent writes `funding.json` (0600, durably) before it journals the transfer. The
child claims it at its first boot by renaming it to `funding.claimed.json`; a parent that
resumes after a crash and finds a grant still unclaimed revokes it by renaming it to
`funding.revoked.json` and takes the money back. Whichever rename happens first wins, so
the money is always in exactly one place.

Both are idempotent, because a process can die right after its rename: a child that
claimed but never saved its state claims the same grant again at its next first boot,
and a parent that revoked but never journaled the refund revokes (and refunds) again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal

from singularity.errors import FatalIoError, StateError
from singularity.jsoncodec import compact, loads_strict
from singularity.money import parse_money, render_money
from singularity.secrets import os_error_text
from singularity.storage import fsio

GRANT = "funding.json"
CLAIMED = "funding.claimed.json"
REVOKED = "funding.revoked.json"
TEMP_PREFIX = ".grant-"


@dataclass(frozen=True)
class Grant:
    """What a parent gave a child."""

    child_id: str
    amount: Decimal
    operation_id: str


def write_grant(dir_fd: int, grant: Grant) -> None:
    """Durably write the grant into the child's directory."""
    data = compact(
        {
            "child_id": grant.child_id,
            "amount": render_money(grant.amount),
            "operation_id": grant.operation_id,
        }
    ).encode("utf-8")
    fsio.replace_file(dir_fd, GRANT, data, temp_prefix=TEMP_PREFIX, point="funding")


def _read(dir_fd: int, name: str) -> Grant:
    document = loads_strict(fsio.read_at(dir_fd, name, 65536))
    if not isinstance(document, dict):
        raise ValueError(f"{name} must hold a JSON object")
    return Grant(
        str(document["child_id"]), parse_money(document["amount"]), str(document["operation_id"])
    )


def _rename(dir_fd: int, source: str, target: str) -> bool:
    try:
        fsio.failpoint("funding.rename")
        os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    fsio.fsync_dir(dir_fd, "funding")
    return True


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def claim(dir_fd: int) -> Grant | None:
    """Claim the grant (a child's first boot, before it has a state); None when there is none.

    A grant this directory already claimed is claimed again: the child died before saving
    the state that holds the money.
    """
    try:
        if not _rename(dir_fd, GRANT, CLAIMED):
            if _exists(dir_fd, REVOKED):
                raise StateError("this child's funding was withdrawn by its parent")
            if not _exists(dir_fd, CLAIMED):
                return None
        return _read(dir_fd, CLAIMED)
    except (OSError, ValueError, KeyError) as error:
        text = os_error_text(error) if isinstance(error, OSError) else str(error)
        raise FatalIoError(f"cannot claim {GRANT}: {text}") from None


def revoke(dir_fd: int) -> Grant | None:
    """Take back a grant nobody claimed; None when it was claimed (or never written).

    A grant already revoked is returned again: the caller knows from its journal whether
    the refund was recorded.
    """
    try:
        if not _rename(dir_fd, GRANT, REVOKED) and not _exists(dir_fd, REVOKED):
            return None
        return _read(dir_fd, REVOKED)
    except (OSError, ValueError, KeyError) as error:
        text = os_error_text(error) if isinstance(error, OSError) else str(error)
        raise FatalIoError(f"cannot revoke {GRANT}: {text}") from None
