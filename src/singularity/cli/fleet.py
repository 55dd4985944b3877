"""`singularity worker` and `singularity fleet`: beings on many machines, on Temporal.

The fleet package (and so `temporalio`) is imported only when one of these commands runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from singularity.cli.listening import port_option
from singularity.cli.logs import report_error
from singularity.cli.options import settings_from, wait_options, with_options
from singularity.cli.output import console, print_json
from singularity.config import ALL_OPTIONS, FLEET_OPTIONS, Option, resolve_fleet
from singularity.errors import ConfigurationError, RuntimeFailure, SingularityError

if TYPE_CHECKING:
    from temporalio.client import Client

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
PER_BEING = {"agent_id", "state_dir", "state_url", "workspace", "resume", "sanctum_dir"}
"""Options a worker does not take: each being has its own (its key, its place)."""
WORKER_OPTIONS = tuple(option for option in ALL_OPTIONS if option.name not in PER_BEING)
FLEET_NAMES = {option.name for option in FLEET_OPTIONS}
CONNECTION = (
    "temporal",
    "temporal_namespace",
    "temporal_tls",
    "temporal_ca_file",
    "temporal_tls_server_name",
    "temporal_cert_file",
    "temporal_key_file",
    "temporal_api_key_file",
)
"""The options of the connection to Temporal, which every fleet command takes."""


def _fleet_option(option: Option) -> Callable[[F], F]:
    env = f" [env: {option.env}]" if option.env else ""
    default = f" [default: {option.default}]" if option.default else ""
    text = f"{option.help}{env}{default}"
    if option.kind == "bool":
        return click.option(option.flag, option.name, is_flag=True, default=None, help=text)
    return click.option(option.flag, option.name, default=None, help=text)


def fleet_options(*names: str) -> Callable[[F], F]:
    """The named fleet options (`--temporal`, `--temporal-namespace`, …) on a command."""

    def decorate(function: F) -> F:
        for option in reversed(FLEET_OPTIONS):
            if option.name in names:
                function = _fleet_option(option)(function)
        return function

    return decorate


def _fleet_module(name: str) -> Any:
    try:
        return importlib.import_module(f"singularity.fleet.{name}")
    except ImportError as error:
        raise ConfigurationError(
            f"the fleet needs the [fleet] extra (pip install 'singularity[fleet]'): {error}"
        ) from None


def _fleet() -> Any:
    return _fleet_module("control"), _fleet_module("worker")


def _run(work: Callable[[], Coroutine[Any, Any, T]], show: Callable[[T], None]) -> NoReturn:
    """Run a client's work, show its result, and exit at once.

    The Temporal client's threads can outlive the event loop and crash the interpreter's
    teardown (SIGABRT after the work is done), so a fleet command skips it: streams are
    flushed and the process ends with the command's exit code.
    """
    code = 0
    try:
        show(asyncio.run(work()))
    except SingularityError as error:
        report_error(f"singularity: {error}", error.exit_code)
        code = error.exit_code
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _connection(values: dict[str, object]) -> Any:
    """The `TemporalConnection` of the resolved options (refused when inconsistent)."""
    return _fleet_module("connection").TemporalConnection.from_options(values)


async def _client(params: dict[str, Any]) -> Client:
    client: Client = await _fleet_module("connection").connect(_connection(resolve_fleet(params)))
    return client


@click.command(name="worker")
@fleet_options(*CONNECTION, "task_queue", "state_url", "local_dir")
@click.option(
    "--keep-idle",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds a being no visit used stays open on this worker.",
)
@click.option(
    "--max-visits",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Visits this worker runs at once.",
)
@with_options(WORKER_OPTIONS)
def worker_command(keep_idle: float, max_visits: int, **params: Any) -> None:
    """Run a fleet worker: beings' workflows and cycles, from the state store."""
    values = resolve_fleet({name: params.pop(name) for name in FLEET_NAMES})
    if values["state_url"] is None:
        raise ConfigurationError("--state-url is required (or SINGULARITY_STATE_URL)")
    config_file = params.pop("config_file", None)
    local_dir = None if values["local_dir"] is None else str(values["local_dir"])
    # Refuses bad options before starting.
    settings_from({**params, "config_file": config_file}, on_postgres=True)
    _fleet_module("places").FleetStore.parse(str(values["state_url"]), local_dir)
    _, worker = _fleet()
    options = worker.WorkerOptions(
        connection=_connection(values),
        state_url=str(values["state_url"]),
        task_queue=str(values["task_queue"]),
        local_dir=local_dir,
        runtime_params=params,
        config_file=config_file,
        keep_idle_secs=keep_idle,
        max_visits=max_visits,
    )
    from singularity.runtime.loop.hardening import make_non_dumpable

    make_non_dumpable()
    _run(lambda: worker.run_worker(options), lambda _: None)


@click.group(name="fleet")
def fleet() -> None:
    """Start, steer and watch the beings of a fleet."""


def _set_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise ConfigurationError(f"--set {pair!r}: expected NAME=VALUE (an option name)")
        options[name.strip().replace("-", "_")] = value
    return options


@fleet.command(name="start")
@fleet_options(*CONNECTION, "task_queue")
@click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="An option of the being (as `run` would take it), e.g. starting_balance=5.",
)
@click.argument("key")
def fleet_start(key: str, pairs: tuple[str, ...], **params: Any) -> None:
    """Start a being in the fleet (its key is its agent id and its workflow id)."""
    control, _ = _fleet()
    options = _set_pairs(pairs)
    queue = str(resolve_fleet(params)["task_queue"])

    async def work() -> dict[str, Any]:
        return await control.start(await _client(params), key, options, queue)  # type: ignore[no-any-return]

    _run(work, print_json)


def _control_command(kind: str, summary: str) -> click.Command:
    @fleet_options(*CONNECTION)
    @click.argument("key")
    def command(key: str, **params: Any) -> None:
        control, _ = _fleet()

        async def work() -> dict[str, Any]:
            return await control.request(await _client(params), key, kind)  # type: ignore[no-any-return]

        _run(work, print_json)

    command.__doc__ = summary
    return fleet.command(name=kind)(command)


_control_command("stop", "Stop a being: its cycle in flight ends at the next safe point.")
_control_command("pause", "Pause a being: it lives no cycle until resumed.")
_control_command("resume", "Resume a paused being.")


@fleet.command(name="topup")
@fleet_options(*CONNECTION)
@click.option("--note", default=None, help="A note journaled with the credit (512 bytes at most).")
@click.argument("key")
@click.argument("amount")
def fleet_topup(key: str, amount: str, note: str | None, **params: Any) -> None:
    """Credit a being's budget (an operator credit, never revenue)."""
    control, _ = _fleet()

    async def work() -> dict[str, Any]:
        client = await _client(params)
        return await control.request(client, key, "credit", amount=amount, note=note)  # type: ignore[no-any-return]

    _run(work, print_json)


@fleet.command(name="say")
@fleet_options(*CONNECTION)
@wait_options("With --wait: give up after this many seconds.")
@click.argument("key")
@click.argument("text")
def fleet_say(key: str, text: str, wait: bool, timeout: float | None, **params: Any) -> None:
    """Send a message to a being; it reads it at the start of its next cycle."""
    control, _ = _fleet()

    async def work() -> dict[str, Any]:
        client = await _client(params)
        sent: dict[str, Any] = await control.request(client, key, "message", text=text)
        if not wait:
            return sent
        answer = control.reply(client, key, str(sent["request_id"]))
        try:
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise RuntimeFailure(f"no cycle read the message within {timeout:g} s") from None

    def show(answer: dict[str, Any]) -> None:
        if not wait:
            print_json(answer)
            return
        if answer["status"] != "completed" or not answer["reply"]:
            raise RuntimeFailure(
                f"the cycle that read the message ended {answer['status']} without a plain reply"
            )
        click.echo(answer["reply"])

    _run(work, show)


@fleet.command(name="list")
@fleet_options(*CONNECTION)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def fleet_list(as_json: bool, **params: Any) -> None:
    """List the living beings of the fleet with their status and money."""
    control, _ = _fleet()

    async def work() -> list[dict[str, Any]]:
        return await control.living(await _client(params))  # type: ignore[no-any-return]

    def show(beings: list[dict[str, Any]]) -> None:
        if as_json:
            print_json(beings)
            return
        from rich.table import Table

        table = Table("being", "status", "cycle", "balance", "spent", "worker", "waiting")
        for being in beings:
            table.add_row(
                being["key"],
                being["status"],
                str(being["cycle"]),
                being["balance_usd"],
                being["spent_usd"],
                being["worker"] or "-",
                str(len(being["waiting"])),
            )
        console().print(table)

    _run(work, show)


@fleet.command(name="show")
@fleet_options(*CONNECTION)
@click.argument("key")
def fleet_show(key: str, **params: Any) -> None:
    """Print a being's status in the fleet (JSON)."""
    control, _ = _fleet()

    async def work() -> dict[str, Any]:
        return await control.status(await _client(params), key)  # type: ignore[no-any-return]

    _run(work, print_json)


@fleet.command(name="dev")
@click.option(
    "--dir",
    "folder",
    default=".singularity-fleet",
    show_default=True,
    help="Folder of the trial: Temporal's database, PostgreSQL's data, the beings' local files.",
)
@port_option(7233, "Temporal's port (0: any free port).")
@click.option("--ui/--no-ui", default=True, show_default=True, help="Serve Temporal's web UI.")
def fleet_dev(folder: str, port: int, ui: bool) -> None:
    """Run a local Temporal dev server and PostgreSQL for a one-machine fleet, until Ctrl-C
    or SIGTERM."""
    from singularity.fleet.dev import TemporalDevServer, stop_on_sigterm, wait_forever
    from singularity.testing.postgres import start_server

    stop_on_sigterm()
    root = os.path.abspath(folder)
    os.makedirs(root, 0o700, exist_ok=True)
    if os.geteuid() == 0:
        os.chmod(root, 0o711)  # PostgreSQL runs as its own user, which must reach its data
    with contextlib.ExitStack() as servers:
        temporal = TemporalDevServer(
            port=port,
            database=os.path.join(root, "temporal.sqlite"),
            ui=ui,
            log_path=os.path.join(root, "temporal.log"),
        ).start()
        servers.callback(temporal.stop)
        try:
            postgres = start_server(os.path.join(root, "postgres"))
        except RuntimeError as error:
            raise RuntimeFailure(f"PostgreSQL did not start: {error}") from None
        servers.callback(postgres.stop)
        servers.callback(_ignore_stop_signals)  # a second signal must not cut the stops
        local = os.path.join(root, "beings")
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C or SIGTERM: how it stops
            print_json(
                {
                    "temporal": temporal.target,
                    "postgresql": postgres.url,
                    "beings": local,
                    "worker": f"singularity worker --temporal {temporal.target} "
                    f"--state-url {postgres.url} --local-dir {local}",
                }
            )
            wait_forever()


def _ignore_stop_signals() -> None:
    import signal

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
