"""Boot, living and shutdown of a being (spec §7.1, §7.6, §7.7; decisions 9–10).

`Runtime.boot` validates everything before it touches the state, opens the being
through the boot matrix, reconciles its ledger and archive, builds the gateway client
and the catalogue, and saves it `running`. `run` lives cycles until the being cannot
afford its next call, is asked to stop, or reaches `max_cycles`; `shutdown` always runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.mind_import import ImportDocument, ImportReport, merge, parse_import
from singularity.errors import BramaError, RetryClass, SingularityError, StateError
from singularity.gateway.auth import Auth
from singularity.gateway.client import BramaClient
from singularity.journal.extension import journal_extension
from singularity.most.client import MostClient
from singularity.most.tools import most_tools
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.children import settle_unstarted_children, spawn_child_tools
from singularity.runtime.cycle import CycleLimits, CycleReport, Life, live_cycle
from singularity.runtime.extension import Extension
from singularity.runtime.import_service import ImportService, socket_path
from singularity.runtime.importing import refusal_message
from singularity.runtime.sanctum import check_sanctum, live_pulses, sanctum_extension
from singularity.runtime.tool_call import answer_open_calls
from singularity.settings_check import Credentials, canonical_workspace, check_runtime
from singularity.skills import Skills, plan_skills, start_skills
from singularity.storage.activity import Event
from singularity.timestamps import Clock, system_clock
from singularity.tools.base import FunctionToolset, Toolset
from singularity.tools.catalogue import Catalogue
from singularity.tools.confinement import Workspace, check_disjoint
from singularity.tools.files import file_tools
from singularity.tools.model_tool import switch_model_tools
from singularity.tools.self_tools import memory_and_self_tools

log = logging.getLogger(__name__)


def journal_import(being: LiveBeing, report: ImportReport) -> None:
    """Journal an accepted import (`mind_imported`)."""
    being.journal(
        events.mind_imported(
            being.now(),
            report.source_kind,
            report.source_id,
            report.imported,
            report.attributed,
            report.unchanged,
        )
    )


def gateway_auth(credentials: Credentials) -> Auth:
    """The gateway authentication the credentials call for (decision 5)."""
    secret = credentials.brama_secret
    if credentials.brama_mode == "hmac" and secret is not None:
        return Auth.hmac(secret.value)
    if credentials.brama_mode == "bearer" and secret is not None:
        return Auth.bearer(secret.value)
    return Auth.none()


def builtin_toolsets(
    being: LiveBeing, settings: Settings, gateway: BramaClient, workspace: Workspace
) -> list[Toolset]:
    """The built-ins in catalogue order (spec §10.1)."""
    state = being.state
    return [
        memory_and_self_tools(state, being.clock),
        switch_model_tools(state, gateway.models),
        spawn_child_tools(being, settings),
        FunctionToolset(file_tools(workspace)),
    ]


def default_extensions(being: LiveBeing, settings: Settings) -> list[Extension]:
    """The built-in parts every being has unless a caller names its own: the sanctum, the
    private journal."""
    return [sanctum_extension(being, settings), journal_extension(being, settings)]


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
    ) -> Runtime:
        """Validate, open the being, reconcile, build its tools, save it `running`."""
        credentials = check_runtime(settings)
        workspace_root = canonical_workspace(settings.workspace)
        check_disjoint(workspace_root, settings.state_dir)
        check_sanctum(settings, workspace_root)
        endpoints = plan_skills(settings)
        being = open_being(settings, clock=clock)
        being.listeners.extend(watch(being) for watch in watchers)
        skills = Skills()
        try:
            applied = ledger.reconcile(being, being.activity.events_at_open)
            if applied:
                log.warning("applied %d journaled ledger entries the saved budget missed", applied)
            refunded = settle_unstarted_children(being, settings)
            if refunded:
                log.warning("took back the funding of %d child(ren) that never started", refunded)
            report = None
            if startup_import is not None:
                report = merge(being.state, startup_import, being.now())
                if not report.accepted:
                    raise StateError(
                        refusal_message(
                            report.conflicting,
                            report.rejected,
                            prefix="startup import refused",
                            state="created",
                        )
                    )
            workspace = Workspace(workspace_root)
            workspace.remove_stale_temps()
            gateway = BramaClient(
                settings.brama_url,
                agent_id=settings.agent_id,
                auth=gateway_auth(credentials),
                timeout=settings.http_timeout_secs,
                max_tokens=settings.max_tokens,
                temperature=settings.temperature,
            )
            skills = start_skills(
                endpoints,
                timeout=settings.mcp_timeout_secs,
                grace=settings.shutdown_grace_secs,
                required_surfaces=settings.required_surface_list,
            )
            skills.on_warning(
                lambda text: being.journal(events.warning(being.now(), being.state.cycle, text))
            )
            toolsets: list[Toolset] = list(skills.toolsets)
            toolsets += list(extra_toolsets(being)) if extra_toolsets else []
            most = None
            if credentials.most_token is not None:
                most = MostClient(
                    settings.most_url, credentials.most_token, timeout=settings.http_timeout_secs
                )
                toolsets.append(most_tools(most))
            toolsets += builtin_toolsets(being, settings, gateway, workspace)
            if extensions is None:
                parts = default_extensions(being, settings)
            else:
                parts = list(extensions(being))
            for part in parts:
                toolsets += part.toolsets()
            catalogue = Catalogue(toolsets)
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
            catalogue,
            gateway,
            ledger.Prices.from_settings(settings),
            limits,
            stop_requested=runtime_stop.is_set,
            extensions=parts,
        )
        runtime = cls(settings, being, gateway, workspace, life, report, runtime_stop)
        runtime.most = most
        runtime.skills = skills
        state = being.state
        state.status = "running"
        being.journal(events.started(being.now()))
        if report is not None:
            journal_import(being, report)
        being.save()
        return runtime

    def request_stop(self) -> None:
        """Ask the being to stop at the next safe point."""
        self.stop_event.set()

    async def _live_one(self, life: Life | None = None) -> CycleReport:
        """One cycle with the extensions' hooks around it (`life`: a pulse's capped life)."""
        if not self.extensions_started:
            self.extensions_started = True
            for extension in self.life.extensions:
                await extension.at_boot()
        report = await live_cycle(life or self.life)
        for extension in self.life.extensions:
            await extension.after_cycle(report)
        return report

    async def once(self) -> CycleReport:
        """Live exactly one cycle."""
        try:
            return await self._live_one()
        except BramaError as error:
            self._note_permanent(error)
            raise

    def _note_permanent(self, error: BramaError) -> None:
        if error.retry is RetryClass.PERMANENT:
            self.failure = error

    async def apply_import(self, document_bytes: bytes) -> ImportReport:
        """Apply an import between cycles: merge, journal and save, as an offline import would."""
        document = parse_import(document_bytes)
        async with self.cycle_lock:
            being = self.being
            report = merge(being.state, document, being.now())
            if report.accepted:
                journal_import(being, report)
                being.save()
            return report

    async def run(self, max_cycles: int | None = None) -> None:
        """Live cycles until exhausted, stopped, or `max_cycles`; serve imports between cycles."""
        service = ImportService(socket_path(self.settings.state_dir), self.apply_import)
        await service.start()
        try:
            if self.settings.pulse:
                await live_pulses(self, max_cycles)
            else:
                await self._live(max_cycles)
        finally:
            await service.stop()

    async def _live(self, max_cycles: int | None) -> None:
        lived = 0
        while not self.stop_event.is_set() and (max_cycles is None or lived < max_cycles):
            try:
                async with self.cycle_lock:
                    report = await self._live_one()
            except BramaError as error:
                if error.retry is RetryClass.PERMANENT:
                    self._note_permanent(error)
                    raise
                self._tolerate(error)
            except SingularityError as error:
                if error.exit_code == 4 and not isinstance(error, StateError):
                    raise  # a write or fsync failure is fatal (decision 12)
                self._tolerate(error)
            else:
                log.info(
                    "cycle %d %s; balance %s USD, earned %s USD",
                    report.cycle,
                    report.status,
                    report.balance_usd,
                    report.earned_usd,
                )
                if report.status in ("budget_exhausted", "cancelled"):
                    break
            lived += 1  # a cycle that failed and was tolerated counts too
            if max_cycles is not None and lived >= max_cycles:
                break
            await self._sleep(self.settings.cycle_interval_secs)

    def _tolerate(self, error: SingularityError) -> None:
        being = self.being
        log.warning("cycle %d failed: %s", being.state.cycle, error)
        being.journal(events.warning(being.now(), being.state.cycle, str(error)))

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop_event.wait(), timeout=seconds)
        except TimeoutError:
            pass

    def stop_now(self) -> None:
        """Save the being for an immediate exit (decision 9: a second signal).

        No call is left unanswered in the conversation, the final status is set and
        `stopped` journaled; a reservation whose call is in flight stays open, so the
        next boot charges it. Nothing is raised: the process is about to end.
        """
        being = self.being
        state = being.state
        if being.broken or (self.closed and state.status in ("stopped", "exhausted", "failed")):
            return  # nothing can be written, or shutdown already wrote the end
        try:
            answer_open_calls(being)
            if self.failure is not None:
                state.status = "failed"
            elif state.budget.solvent and state.status != "exhausted":
                state.status = "stopped"
            else:
                state.status = "exhausted"
            being.journal(events.stopped(being.now(), state.cycle, state.status))
            being.save()
        except SingularityError as error:
            log.error("could not save before exiting: %s", error)

    async def shutdown(self) -> None:
        """Stopping, then stopped or exhausted (spec §7.7); failed after a permanent error."""
        if self.closed:
            return
        self.closed = True
        being = self.being
        state = being.state
        try:
            if not being.broken:
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
                being.journal(events.stopped(being.now(), state.cycle, state.status))
                being.save()
        finally:
            try:
                await self.skills.aclose()  # a no-op unless the steps above were cut short
            finally:
                being.close()
