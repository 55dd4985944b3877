"""`singularity doctor`: a read-only pre-flight of everything a being depends on (spec §17).

Every check runs, whatever failed before it: each configuration check of a boot (the same
ones `run` makes, so `doctor` never passes what `run` refuses), the state directory's boot
matrix and resume gate (read without the lock), the gateway's health and
model list, Most, and the skill servers, started and stopped as `run` would. The report
is spec §17's object; when something failed, `ok` is false and `problems` lists each
failure as `<check>: <error>`, and the first failure is raised after the report.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from singularity.config import Settings
from singularity.errors import ConfigurationError, MostError, SingularityError
from singularity.gateway.client import BramaClient
from singularity.most.client import MostClient
from singularity.runtime.being import check_state
from singularity.runtime.loop.assembly import gateway_auth
from singularity.runtime.loop.preflight import BOOT_STEPS
from singularity.secrets import Secret
from singularity.settings_check import Credentials
from singularity.skills import start_skills
from singularity.skills.endpoints import Endpoint
from singularity.tools.model_tool import SELECTORS, TASK_PREFIX

log = logging.getLogger(__name__)
DOCTOR_SELECTORS = (*SELECTORS,)  # `best` is accepted too (decision 4)
T = TypeVar("T")


@dataclass
class Checks:
    """The outcome of every check: what each established, and what failed."""

    results: dict[str, object] = field(default_factory=dict)
    failures: list[tuple[str, SingularityError]] = field(default_factory=list)

    def attempt(self, name: str, check: Callable[[], T]) -> T | None:
        """Run one check; a failure is recorded, not raised."""
        try:
            result = check()
        except SingularityError as error:
            self.failures.append((name, error))
            return None
        self.results[name] = result
        return result

    def passed(self, *names: str) -> bool:
        """Whether every named check ran and passed."""
        return all(name in self.results for name in names)

    def problems(self) -> list[str]:
        """Each failure once, as `<check>: <error>`."""
        seen: set[str] = set()
        lines = []
        for name, error in self.failures:
            if str(error) not in seen:
                seen.add(str(error))
                lines.append(f"{name}: {error}")
        return lines


@dataclass(frozen=True)
class DoctorReport:
    """The report to print, and the error to exit with when a check failed."""

    document: dict[str, Any]
    failure: SingularityError | None


async def doctor(settings: Settings) -> DoctorReport:
    """Every check, as `run` would make it; writes no being state."""
    findings = Checks()
    for name, step in BOOT_STEPS:
        findings.attempt(name, functools.partial(step, settings))
    findings.attempt("state", functools.partial(check_state, settings))
    from singularity.journal.embedders import check_embedder  # NumPy only when doctor runs

    choice = settings.journal_embedder
    embedder = findings.attempt("journal embedder", functools.partial(check_embedder, choice))
    if embedder is not None:
        log.warning("journal: %s", embedder)  # a weaker journal, not a failure
    results = findings.results
    if findings.passed("gateway url", "gateway credential"):
        secret, api_key = cast(tuple[Secret | None, Secret | None], results["gateway credential"])
        await _check_gateway(settings, Credentials(secret, api_key, None), findings)
    most = None
    token = cast(Secret | None, results.get("most token"))
    if token is not None and findings.passed("most url"):
        most = await _check_most(settings, token, findings)
    tools = None
    if findings.passed("skills"):
        endpoints = cast(list[Endpoint], results["skills"])
        tools = await _check_skills(settings, endpoints, findings)
    document: dict[str, Any] = {
        "brama_model": settings.brama_model,
        "las_tools": tools,
        "most": most,
        "ok": not findings.failures,
    }
    if findings.failures:
        document["problems"] = findings.problems()
    return DoctorReport(document, findings.failures[0][1] if findings.failures else None)


async def _check_gateway(settings: Settings, credentials: Credentials, findings: Checks) -> None:
    model = settings.brama_model
    try:
        client = BramaClient(
            settings.brama_url,
            agent_id=settings.agent_id,
            auth=gateway_auth(credentials),
            timeout=settings.http_timeout_secs,
        )
    except SingularityError as error:
        findings.failures.append(("gateway", error))
        return
    async with client as gateway:
        try:
            await gateway.health()
        except SingularityError as error:
            findings.failures.append(("gateway health", error))
            return
        if model in DOCTOR_SELECTORS or model.startswith(TASK_PREFIX):
            return
        try:
            available = await gateway.models()
        except SingularityError as error:
            findings.failures.append(("gateway model", error))
            return
        if model not in available:
            missing = ConfigurationError(f"configured Brama model is unavailable: {model}")
            findings.failures.append(("gateway model", missing))


async def _check_most(settings: Settings, token: Secret, findings: Checks) -> dict[str, Any] | None:
    client = MostClient(settings.most_url, token, timeout=settings.http_timeout_secs)
    try:
        health = await client.health()
    except SingularityError as error:
        findings.failures.append(("most", error))
        return None
    finally:
        await client.aclose()
    backends = health.get("backends")
    if not backends or backends == "none":
        findings.failures.append(("most", MostError("Most has no send-capable backend")))
    return health


async def _check_skills(
    settings: Settings, endpoints: list[Endpoint], findings: Checks
) -> int | None:
    try:
        skills = start_skills(
            endpoints,
            timeout=settings.mcp_timeout_secs,
            grace=settings.shutdown_grace_secs,
            required_surfaces=settings.required_surface_list,
        )
    except SingularityError as error:
        findings.failures.append(("skill servers", error))
        return None
    try:
        return len(skills.tool_names)
    finally:
        await skills.aclose()
