"""Boot, living and shutdown of a being (spec §7.1, §7.6, §7.7; decisions 9–10).

`Runtime.boot` validates everything before it touches the state, opens the being
through the boot matrix, reconciles its ledger and archive, builds the gateway client
and the catalogue, and saves it `running`. `live` is the one loop: it lives the steps of
a schedule (`runtime/loop/schedule.py`: cycles, or pulses) until the being cannot afford its
next call, is asked to stop, or the schedule is over; `shutdown` always runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.operator import OperatorRequest
from singularity.errors import BramaError, FatalIoError, RetryClass, SingularityError
from singularity.gateway.client import BramaClient
from singularity.most.client import MostClient
from singularity.runtime import heap, ledger
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.family.children import Starter, settle_unstarted_children
from singularity.runtime.loop.assembly import assemble
from singularity.runtime.loop.cycle import CycleLimits, CycleReport, Life, live_cycle
from singularity.runtime.loop.extension import Extension
from singularity.runtime.loop.operator import OperatorDesk
from singularity.runtime.loop.preflight import preflight
from singularity.runtime.loop.reservation import OpenReservations
from singularity.runtime.loop.sanctum import SanctumExtension
from singularity.runtime.loop.schedule import Lived, LoopSchedule, Once, PulseReport, schedule_for
from singularity.runtime.loop.tool_call import answer_open_calls
from singularity.runtime.loop.withholding import Withholding, withheld_import
from singularity.runtime.mind_import.apply import merge_at_boot
from singularity.runtime.mind_import.document import (
    ImportDocument,
    ImportReport,
    merge,
    parse_import,
)
from singularity.runtime.mind_import.service import ImportService, socket_path
from singularity.settings_check import born_workspace
from singularity.skills import Skills
from singularity.storage.activity import Event
from singularity.storage.statedir import create_private_directory
from singularity.timestamps import Clock, system_clock
from singularity.tools.base import Toolset
from singularity.tools.confinement import Workspace

log = logging.getLogger(__name__)
BACKOFF_CAP = 60
"""The longest wait between failing cycles, in cycle intervals (decision 25)."""
BACKOFF_DOUBLINGS = 6  # 2**6 > BACKOFF_CAP: doubling further changes nothing
IN_FLIGHT_CHARGED = "stopped during a model call: its outcome is unknown, its reservation is paid"


@dataclass
class Runtime:
    """A booted being with its gateway, workspace and catalogue."""

    settings: Settings
    being: LiveBeing
    gateway: BramaClient
    workspace: Workspace
    life: Life
    startup_import: ImportReport | None = None
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    cycle_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failure: BramaError | None = None
    """The permanent gateway error that ended the being's life, if any (decision 10)."""
    most: MostClient | None = None
    extensions_started: bool = False
    skills: Skills = field(default_factory=Skills)
    withholding: Withholding | None = None
    """The runtime's secrets and the log filter that withholds them (decision 32)."""
    failures: int = 0
    """Cycles in a row that failed and were tolerated."""
    reservations: OpenReservations = field(default_factory=OpenReservations)
    desk: OperatorDesk | None = None

    @classmethod
    def boot(
        cls,
        settings: Settings,
        *,
        startup_import: ImportDocument | None = None,
        clock: Clock = system_clock,
        extra_toolsets: Callable[[LiveBeing], list[Toolset]] | None = None,
        watchers: Sequence[Callable[[LiveBeing], Callable[[Event], None]]] = (),
        extensions: Callable[[LiveBeing], Sequence[Extension]] | None = None,
        start_child: Starter | None = None,
    ) -> Runtime:
        """Validate, open the being, reconcile, build its tools, save it `running`.

        `start_child` starts the children it funds (by default each as a process)."""
        checked = preflight(settings)
        if settings.ignored_config_file is not None:
            log.warning(
                "not reading %s: the working directory is inside the workspace, which the "
                "being can write (pass --config to name a file outside it)",
                settings.ignored_config_file,
            )
        credentials, workspace_root = checked.credentials, checked.workspace_root
        withholding = Withholding(settings, credentials)
        being = open_being(settings, clock=clock)
        being.withhold_secrets(withholding.scrubber)
        being.listeners.extend(watch(being) for watch in watchers)
        skills = Skills()
        try:
            applied = ledger.reconcile(being, being.events_at_open)
            if applied:
                log.warning("applied %d journaled ledger entries the saved budget missed", applied)
            answered = answer_open_calls(being)
            if answered:
                log.warning("answered %d tool call(s) that a stop left open", answered)
            desk = OperatorDesk.open(being, being.events_at_open)
            refunded = settle_unstarted_children(being, settings)
            if refunded:
                log.warning("took back the funding of %d child(ren) that never started", refunded)
            report = None
            if startup_import is not None:
                document = withheld_import(startup_import, being.scrubber)
                report = merge_at_boot(being.state, document, being.now())
            if being.created:
                # The birth is durable before anything else of the being is: a kill from here
                # on leaves a state `--resume` can open, a kill before it nothing but a journal
                # with no event, which a plain start takes over.
                if born_workspace(settings):
                    create_private_directory(workspace_root)
                being.save()
            workspace = Workspace(workspace_root)
            workspace.remove_stale_temps()
            built = assemble(
                being,
                settings,
                checked,
                workspace,
                withholding.scrubber,
                desk,
                extra_toolsets=extra_toolsets,
                extensions=extensions,
                start_child=start_child,
            )
            skills = built.skills
        except BaseException:
            skills.close()
            being.close()
            raise
        limits = CycleLimits(
            max_tool_rounds=settings.max_tool_rounds,
            max_tokens=settings.max_tokens,
            http_timeout_secs=settings.http_timeout_secs,
            context_tokens=settings.context_tokens,
            stimulus=settings.stimulus,
        )
        runtime_stop = asyncio.Event()
        life = Life(
            being,
            built.catalogue,
            built.gateway,
            ledger.Prices.from_settings(settings),
            limits,
            stop_requested=runtime_stop.is_set,
            extensions=built.parts,
            inbox=desk.opening,
        )
        runtime = cls(settings, being, built.gateway, workspace, life, report, runtime_stop)
        runtime.most = built.most
        being.listeners.append(runtime.reservations)
        runtime.skills = skills
        runtime.desk = desk
        desk.request_stop = runtime.request_stop
        desk.sanctum = lambda: _sanctum_of(built.parts)
        state = being.state
        runtime.withholding = withholding
        state.status = "running"
        try:
            being.journal(events.Started(being.now()))
            if report is not None:
                being.journal(report.event(being.now()))
            being.save()
        except BaseException:
            skills.close()
            being.close()
            raise
        withholding.install()
        heap.settle()  # what boot loaded lives as long as the being
        return runtime

    def request_stop(self) -> None:
        """Ask the being to stop at the next safe point."""
        self.stop_event.set()

    async def start_extensions(self) -> None:
        """Run the extensions' boot hooks, once."""
        if not self.extensions_started:
            self.extensions_started = True
            for extension in self.life.extensions:
                await extension.at_boot()

    def settle_operator(self) -> None:
        """Apply what the operator asked for that takes effect between cycles."""
        if self.desk is not None and not self.being.broken:
            self.desk.settle()

    @property
    def paused(self) -> bool:
        """Whether the operator paused the being (`run` lives no cycle until resumed)."""
        return self.desk is not None and self.desk.paused

    async def live_one(self, life: Life | None = None) -> CycleReport:
        """One cycle with the extensions' hooks around it (`life`: a pulse's capped life).

        Every cycle is lived here: by `once`, by each step of the loop, by a fleet's visit.
        """
        await self.start_extensions()
        self.settle_operator()
        cycle_before = self.being.state.cycle
        try:
            report = await live_cycle(life or self.life)
            being = self.being
            if report.cycle > cycle_before:
                being.journal(events.CycleFinished(being.now(), report.cycle, report.status))
            for extension in self.life.extensions:
                await extension.after_cycle(report)
            if being.pending:
                being.save()  # the one durable step after the cycle's last model call
        finally:
            if self.withholding is not None:
                self.withholding.refresh()  # the journal may have made its first key
        return report

    async def once(self) -> CycleReport:
        """Live exactly one cycle, through the living loop; its failure is raised."""
        single = Once()
        await self.live(single)
        assert isinstance(single.outcome, CycleReport)
        return single.outcome

    async def pulse_once(self) -> PulseReport:
        """Live exactly one pulse now, through the living loop; its failure is raised."""
        single = Once(pulse=True)
        await self.live(single)
        assert isinstance(single.outcome, PulseReport)
        return single.outcome

    def _note_permanent(self, error: BramaError) -> None:
        if error.retry is RetryClass.PERMANENT:
            self.failure = error

    async def apply_import(self, document_bytes: bytes) -> ImportReport:
        """Apply an import between cycles: merge, journal and save, as an offline import would."""
        document = withheld_import(parse_import(document_bytes), self.being.scrubber)
        async with self.cycle_lock:
            being = self.being
            report = merge(being.state, document, being.now())
            if report.accepted:
                being.journal(report.event(being.now()))
                being.save()
            return report

    async def run(self, max_cycles: int | None = None) -> None:
        """Live cycles (pulses in Pulse mode) until exhausted, stopped, or `max_cycles`;
        serve imports and the operator between them."""
        service = ImportService(
            socket_path(self.settings.state_dir), self.apply_import, self.accept_operator
        )
        await service.start()
        try:
            await self.live(schedule_for(self.settings.pulse, max_cycles))
        finally:
            await service.stop()

    def accept_operator(self, request: OperatorRequest) -> dict[str, object]:
        """Queue an operator request that came through the local socket."""
        assert self.desk is not None
        self.desk.accept(request)
        return {"request_id": request.id, "kind": request.kind, "queued": True}

    async def live(
        self,
        schedule: LoopSchedule,
        *,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        """The living loop: the schedule's steps until it is over or the being stops.

        Between steps the operator's requests are applied; a paused being waits for a
        resume, but for a single step a command asked for. `sleep` waits between steps (by
        default the operator desk's sleep, which a message or a pause ends early).
        """
        rest = sleep or self.sleep
        await self.start_extensions()
        while not schedule.over and (schedule.single or not self.stop_event.is_set()):
            self.settle_operator()
            if self.paused and not schedule.single:
                await self.wait_for_operator(None)
                continue
            wait = schedule.wait(self)
            if wait > 0:
                await rest(wait)
                continue
            schedule.lived(await self.live_step(schedule))
            heap.resettle()  # between steps, never inside a model round
            if not schedule.over:
                after = schedule.rest(self)
                if after > 0:
                    await rest(after)

    async def live_step(self, schedule: LoopSchedule) -> Lived | None:
        """Live one step of the schedule now, under the loop's rule for failures: None when
        it failed and was tolerated (journaled, counted in `failures`); a permanent gateway
        error, a write failure or the failure of a single step is raised."""
        try:
            async with self.cycle_lock:
                done = await schedule.step(self)
        except FatalIoError:
            raise  # a write or fsync failure is fatal (decision 12)
        except BramaError as error:
            if error.retry is RetryClass.PERMANENT:
                self._note_permanent(error)
                raise
            if schedule.single:
                raise
            self._tolerate(error)
            return None
        except SingularityError as error:
            if schedule.single:
                raise
            self._tolerate(error)
            return None
        self.failures = 0
        return done

    def next_wait(self) -> float:
        """Seconds before the next cycle: the interval, doubled for each failure in a row.

        A gateway that is down is not asked again every few seconds (decision 25); the
        wait is capped at sixty intervals.
        """
        interval = self.settings.cycle_interval_secs
        if not self.failures:
            return interval
        return min(interval * 2.0 ** min(self.failures, BACKOFF_DOUBLINGS), interval * BACKOFF_CAP)

    def _tolerate(self, error: SingularityError) -> None:
        """Journal a tolerated failure (shown once, by whoever watches the journal)."""
        being = self.being
        self.failures += 1
        being.journal(events.Warned(being.now(), being.state.cycle, str(error)))
        being.save()

    async def sleep(self, seconds: float) -> None:
        """Sleep between cycles; the operator's requests are applied as they come."""
        if self.desk is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), timeout=seconds)
            return
        await self.desk.sleep(self.stop_event, seconds)

    async def wait_for_operator(self, timeout: float | None) -> bool:
        """Wait for an operator request or a stop; False when the time ran out."""
        if self.desk is None:
            return False
        return await self.desk.wait(self.stop_event, timeout)

    def stop_now(self) -> bool:
        """Save the being for an immediate exit (decision 9: a second signal); True if saved.

        No call is left unanswered in the conversation, a model call in flight is charged
        its reservation (its outcome is unknown, decision 30), the final status is set and
        `stopped` journaled, so the state left is one `verify` accepts. Nothing is raised:
        the process is about to end.
        """
        being = self.being
        state = being.state
        if being.broken:
            return False  # nothing can be written
        if self.closed and state.status in ("stopped", "exhausted", "failed"):
            return True  # shutdown already wrote the end
        try:
            for operation, reserved in self.reservations.pending():
                ledger.charge_reservation(being, operation, reserved)
                being.journal(events.Warned(being.now(), state.cycle, IN_FLIGHT_CHARGED))
            answer_open_calls(being)
            if self.failure is not None:
                state.status = "failed"
            elif state.budget.solvent and state.status != "exhausted":
                state.status = "stopped"
            else:
                state.status = "exhausted"
            being.journal(events.Stopped(being.now(), state.cycle, state.status))
            being.checkpoint()
        except SingularityError as error:
            log.error("could not save before exiting: %s", error)
            return False
        return True

    async def shutdown(self) -> None:
        """Stopping, then stopped or exhausted (spec §7.7); failed after a permanent error."""
        if self.closed:
            return
        self.closed = True
        being = self.being
        state = being.state
        try:
            if not being.broken:
                self.settle_operator()
                solvent = state.budget.solvent and state.status != "exhausted"
                state.status = "stopping"
                being.save()
                for extension in self.life.extensions:
                    await extension.at_stop()
                await self.gateway.aclose()
                await self.skills.aclose()
                if self.most is not None:
                    await self.most.aclose()
                self.workspace.close()
                if self.failure is not None:
                    state.status = "failed"
                else:
                    state.status = "stopped" if solvent else "exhausted"
                being.journal(events.Stopped(being.now(), state.cycle, state.status))
                being.checkpoint()
        finally:
            try:
                await self.skills.aclose()  # a no-op unless the steps above were cut short
            finally:
                being.close()
                if self.withholding is not None:
                    self.withholding.uninstall()
                heap.release()


def _sanctum_of(parts: Sequence[Extension]) -> SanctumExtension | None:
    for part in parts:
        if isinstance(part, SanctumExtension):
            return part
    return None
