"""Child beings (spec §14, decision 17): real processes, funded by their parent.

A spawn carves the child's starting balance out of the parent's `remaining`: the grant
file is written into the child's directory, the transfer is journaled (`child_funded`)
and applied, and only then is the child started, as this same program with `run` and
the five environment overrides of §14. Configuration the parent received by flags
reaches the child through the environment; secrets travel only as 0600 files.

A spawn that fails leaves nothing behind: a directory it created is removed, and money
that already moved comes back through a revoked grant (`child_refunded`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

from singularity.config import ALL_OPTIONS, BEARER_FALLBACK_ENV, Settings, inherited_environment
from singularity.domain import events
from singularity.domain.records import ChildRecord
from singularity.money import half, parse_money, render_money, round_down
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.secrets import Secret, os_error_text
from singularity.storage import fsio, funding
from singularity.tools.arguments import STRING, Text, invalid
from singularity.tools.base import FunctionToolset, JsonObject, Outcome, Status
from singularity.tools.typed import tool, toolset

CHILDREN_DIR = "children"
MAX_NAME_BYTES = 128
MAX_TICKER_BYTES = 32
MAX_SPECIALTY_BYTES = 256
# Raw credentials in the environment become 0600 files in the child's directory, unless
# the parent was given the file option itself (the file wins over the raw value, §3.1):
# raw variable -> (file variable, settings field of that file option, file name).
SECRET_FILES = {
    "WISENT_APP_AGENT_AUTH_SECRET": (
        "BRAMA_HMAC_SECRET_FILE",
        "brama_secret_file",
        "brama-hmac.secret",
    ),
    "BRAMA_API_KEY": ("BRAMA_API_KEY_FILE", "brama_api_key_file", "brama-api-key.secret"),
}
# A budget is a plain decimal string in the money range (at most 28 places).
BUDGET_TEXT = re.compile(r"[0-9]{1,29}(?:\.[0-9]{1,28})?")
SECRET_TEMP_PREFIX = ".secret-"
SPAWN_TEMP_PREFIXES = (funding.TEMP_PREFIX, SECRET_TEMP_PREFIX)


@dataclass(frozen=True)
class ChildStart:
    """A funded child, ready to be started: where it lives and how it would run."""

    child_id: str
    state_dir: str
    name: str
    ticker: str
    specialty: str
    environment: Mapping[str, str]


Starter = Callable[[ChildStart], dict[str, object]]
"""Starts a funded child; the tool result's fields beside `child_id`. An OSError, ValueError
or SubprocessError means it did not start (the funding comes back)."""


def start_process(child: ChildStart) -> dict[str, object]:
    """Start the child as this same program with `run`, in its own session (the default)."""
    process = subprocess.Popen(
        child_command(),
        env=dict(child.environment),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    _reap(process)
    return {"pid": process.pid}


def child_environment(
    parent: Mapping[str, str],
    settings: Settings,
    *,
    name: str,
    ticker: str,
    specialty: str,
    state_dir: str,
    secret_files: Mapping[str, str],
) -> dict[str, str]:
    """The parent's environment and resolved settings, no raw secret, and the five overrides."""
    environment = {
        key: value
        for key, value in parent.items()
        if key not in SECRET_FILES and key != BEARER_FALLBACK_ENV
    }
    environment.update(settings_environment(settings))
    environment.update(secret_files)
    environment.update(
        {
            "SINGULARITY_AGENT_NAME": name,
            "SINGULARITY_AGENT_TICKER": ticker,
            "SINGULARITY_SPECIALTY": specialty,
            "SINGULARITY_STATE_DIR": state_dir,
            "SINGULARITY_RESUME": "false",
        }
    )
    # A child keeps its own sanctum under its own state directory, never the parent's.
    environment.pop("SINGULARITY_SANCTUM_DIR", None)
    # A child lives in its state directory, also when its parent lives in PostgreSQL:
    # under the parent's agent id there, it would contend for the parent's own lease.
    environment.pop("SINGULARITY_STATE_URL", None)
    return environment


def settings_environment(settings: Settings) -> dict[str, str]:
    """The resolved settings as variables, decimals in plain notation.

    `str(Decimal("0.0000001"))` is `1E-7`, which the child's configuration would refuse
    as a decimal number; money options are rendered positionally instead.
    """
    values = settings.environment_values()
    for option in ALL_OPTIONS:
        value = getattr(settings, option.name)
        if option.kind == "decimal" and option.env is not None and isinstance(value, Decimal):
            values[option.env] = render_money(value)
    return values


def child_command() -> list[str]:
    """This same program, running `run`.

    `-P` keeps the working directory (by default the being's own workspace, which it can
    write) off `sys.path`: a planted `singularity` package there must never run as the child.
    """
    if not sys.executable or not os.path.isfile(sys.executable):
        raise FileNotFoundError("the Python interpreter running this program cannot be found")
    return [sys.executable, "-P", "-m", "singularity", "run"]


def default_funding(settings: Settings, remaining: Decimal) -> Decimal:
    """The configured starting balance, but never more than half of what the parent has left
    (rounded down to the 28th place)."""
    return min(settings.starting_balance, round_down(half(remaining)))


def _write_secret(dir_fd: int, name: str, secret: Secret) -> None:
    fsio.replace_file(
        dir_fd,
        name,
        secret.value.encode("utf-8"),
        temp_prefix=SECRET_TEMP_PREFIX,
        point="funding",
    )


def _forget_secrets(dir_fd: int) -> None:
    """Remove the secret files (and temp files of a write cut short) of a child that will
    never start."""
    names = {file_name for _, _, file_name in SECRET_FILES.values()}
    for name in os.listdir(dir_fd):
        if name in names or (name.startswith(SPAWN_TEMP_PREFIXES) and name.endswith(".tmp")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)


def _make_child_dir(parent_state_dir: str, child_id: str) -> None:
    """Create `children/<child_id>` (0700) in the parent's state, each new entry synced."""
    parent_fd = fsio.open_dir(parent_state_dir)
    try:
        fsio.make_dir(parent_fd, CHILDREN_DIR, 0o700, "children")
        children_fd = fsio.open_dir(CHILDREN_DIR, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    try:
        os.mkdir(child_id, 0o700, dir_fd=children_fd)
        fsio.fsync_dir(children_fd, "children")
    finally:
        os.close(children_fd)


def _discard(state_dir: str) -> None:
    """Remove the directory of a child that never existed (best effort)."""
    shutil.rmtree(state_dir, ignore_errors=True)


def _reap(process: subprocess.Popen[bytes]) -> None:
    # The parent never supervises a child, but it must not leave a zombie behind.
    threading.Thread(target=process.wait, daemon=True).start()


@dataclass(frozen=True)
class Budget:
    """A child's starting balance: a plain decimal string in the money range, above zero."""

    def schema(self) -> JsonObject:
        return dict(STRING)

    def parse(self, key: str, value: Any) -> Decimal:
        if not isinstance(value, str) or not BUDGET_TEXT.fullmatch(value):
            raise invalid(key)
        try:
            amount = parse_money(value)
        except ValueError:
            raise invalid(key) from None
        if amount <= 0:
            raise invalid(key)
        return amount


@dataclass(frozen=True)
class Parent:
    """What the spawn tool acts for: the parent being, its settings, and how a funded child
    starts (`None`: as a process, `start_process`, once the program is found)."""

    being: LiveBeing
    settings: Settings
    start: Starter | None = None


@tool("singularity_spawn_child", "Create and start a child digital being with separate state")
async def spawn_child(
    parent: Parent,
    *,
    name: Annotated[str, Text(MAX_NAME_BYTES)],
    ticker: Annotated[str, Text(MAX_TICKER_BYTES)],
    specialty: Annotated[str, Text(MAX_SPECIALTY_BYTES)],
    budget: Annotated[Decimal | None, Budget()] = None,
) -> Outcome:
    being, settings = parent.being, parent.settings
    remaining = being.state.budget.remaining
    amount = default_funding(settings, remaining) if budget is None else budget
    if amount <= 0 or amount >= remaining:
        return Outcome.failed(
            "child_funding", "the parent cannot spare that budget and stay solvent"
        )
    if parent.start is None:
        try:
            child_command()
        except FileNotFoundError as error:
            return Outcome.failed("child_executable", str(error))
    child_id = str(uuid.uuid4())
    children_dir = os.path.join(settings.state_dir, CHILDREN_DIR)
    state_dir = os.path.join(children_dir, child_id)
    try:
        _make_child_dir(settings.state_dir, child_id)
    except OSError as error:
        _discard(state_dir)
        return Outcome.failed("child_state", os_error_text(error))
    try:
        dir_fd = fsio.open_dir(state_dir)
    except OSError as error:
        _discard(state_dir)
        return Outcome.failed("child_state", os_error_text(error))
    child = ChildStart(child_id, state_dir, name, ticker, specialty, {})
    try:
        outcome = _fund_and_start(parent, dir_fd, child, amount)
    finally:
        os.close(dir_fd)
    if outcome.status is not Status.SUCCESS:
        with contextlib.suppress(OSError):
            os.rmdir(children_dir)  # only when no other child lives there
    return outcome


SPAWN_CHILD = spawn_child.definition


def _fund_and_start(parent: Parent, dir_fd: int, child: ChildStart, amount: Decimal) -> Outcome:
    """Fund the child (grant, journal, ledger), then start it; refunded if it cannot start."""
    being, settings = parent.being, parent.settings
    operation = ledger.new_operation_id()
    try:
        funding.write_grant(dir_fd, funding.Grant(child.child_id, amount, operation))
        secret_files = {}
        for raw, (variable, file_option, file_name) in SECRET_FILES.items():
            secret = settings.raw_secrets.get(raw)
            if secret is not None and getattr(settings, file_option) is None:
                _write_secret(dir_fd, file_name, secret)
                secret_files[variable] = os.path.join(child.state_dir, file_name)
    except OSError as error:
        _discard(child.state_dir)  # nothing was journaled: the money never left
        return Outcome.failed("child_state", os_error_text(error))
    record = ChildRecord(
        id=child.child_id,
        name=child.name,
        ticker=child.ticker,
        state_dir=child.state_dir,
        created_at=being.now(),
        status="running",
    )
    being.journal(
        events.ChildFunded(
            being.now(), being.state.cycle, operation, child.child_id, amount, record.model_dump()
        )
    )
    ledger.apply_funding(being.state.budget, operation, amount)
    being.save()  # the transfer is durable before a child can claim it
    environment = child_environment(
        inherited_environment(),
        settings,
        name=child.name,
        ticker=child.ticker,
        specialty=child.specialty,
        state_dir=child.state_dir,
        secret_files=secret_files,
    )
    starter = parent.start or start_process
    try:
        started = starter(dataclasses.replace(child, environment=environment))
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        # ValueError: a NUL in a value the configuration file supplied.
        refund(being, dir_fd, child.child_id)
        being.save()  # the refund is durable before the grant it took back is removed
        _discard(child.state_dir)
        text = os_error_text(error) if isinstance(error, OSError) else str(error)
        return Outcome.failed("child_spawn", text)
    being.state.mind.children.append(record)
    return Outcome.success({"child_id": child.child_id, **started})


def spawn_child_tools(
    being: LiveBeing, settings: Settings, start: Starter | None = None
) -> FunctionToolset:
    """The spawn tool, acting for this being; `start` starts each funded child (by default a
    process, `start_process`)."""
    return toolset(Parent(being, settings, start), [spawn_child])


def refund(being: LiveBeing, dir_fd: int, child_id: str) -> bool:
    """Revoke an unclaimed grant and give its amount back to the parent; False if claimed."""
    grant = funding.revoke(dir_fd)
    if grant is None:
        return False
    _forget_secrets(dir_fd)
    operation = ledger.new_operation_id()
    being.journal(
        events.ChildRefunded(being.now(), being.state.cycle, operation, child_id, grant.amount)
    )
    ledger.apply_funding(being.state.budget, operation, grant.amount.copy_negate())
    return True


def settle_unstarted_children(being: LiveBeing, settings: Settings) -> int:
    """At boot: restore records of funded children, refund any that never claimed a grant."""
    records = [
        events.decode(event)
        for event in being.events_at_open
        if events.kind_of(event) in (events.ChildFunded, events.ChildRefunded)
    ]
    funded = {
        record.child_id: record for record in records if isinstance(record, events.ChildFunded)
    }
    refunded = {record.child_id for record in records if isinstance(record, events.ChildRefunded)}
    children = being.state.mind.children
    known = {child.id for child in children}
    for child_id, record in funded.items():
        if child_id not in known and child_id not in refunded:
            children.append(ChildRecord.model_validate(record.record))
            known.add(child_id)
    children_dir = os.path.join(settings.state_dir, CHILDREN_DIR)
    settled = 0
    if not os.path.isdir(children_dir):
        return settled
    for entry in sorted(os.listdir(children_dir)):
        try:
            dir_fd = fsio.open_dir(os.path.join(children_dir, entry))
        except OSError:
            continue
        try:
            if entry in funded and entry not in refunded:
                if refund(being, dir_fd, entry):
                    settled += 1
                    for child in children:
                        if child.id == entry:
                            child.status = "withdrawn"
            elif entry not in funded:
                # Cut short before its funding was journaled: no child ever ran here and
                # the money never left. Take the grant back and remove what the spawn wrote.
                funding.revoke(dir_fd)
                _forget_secrets(dir_fd)
                leftovers = set(os.listdir(dir_fd))
                if leftovers <= {funding.REVOKED}:
                    for name in leftovers:
                        os.unlink(name, dir_fd=dir_fd)
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(children_dir, entry))
        finally:
            os.close(dir_fd)
    return settled
