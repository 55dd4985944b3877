"""Skills: tools served by MCP servers, discovered at boot and called like built-ins.

The servers come from the skills file (`--skills FILE`, the `mcpServers` format) and,
when `--las-entrypoint` is given, the Las aggregator (spec §13, decision 18). Every
`mcp` import lives in this package, and only `start_skills` loads the SDK, so a being
without skills never pays for it.

    endpoints = plan_skills(settings)          # validate: configuration errors, exit 2
    skills = start_skills(endpoints, timeout=…, grace=…, required_surfaces=…)
    Catalogue([*skills.toolsets, *builtins], boundary=OutputBoundary("redact", (workspace,)))
    await skills.aclose()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from singularity.config import Settings, inherited_environment
from singularity.errors import McpError
from singularity.skills.endpoints import Endpoint, file_endpoints, logging_to
from singularity.skills.las import check_required_surfaces, las_endpoint
from singularity.skills.stderr_log import make_log_dir

if TYPE_CHECKING:
    from singularity.skills.host import SkillHost
    from singularity.skills.toolset import McpToolset, Warn

__all__ = ["Skills", "plan_skills", "start_skills"]


def plan_skills(settings: Settings, environ: Mapping[str, str] | None = None) -> list[Endpoint]:
    """Every configured server, Las first, then the skills file in its order."""
    runtime_environ = inherited_environment() if environ is None else environ
    las = las_endpoint(settings, runtime_environ)
    return ([las] if las is not None else []) + file_endpoints(settings, runtime_environ)


@dataclass
class Skills:
    """The running skill servers and their toolsets, in catalogue order."""

    host: SkillHost | None = None
    toolsets: list[McpToolset] = field(default_factory=list)

    @property
    def tool_names(self) -> list[str]:
        """Every skill tool's catalogue name."""
        return [d.name for toolset in self.toolsets for d in toolset.definitions()]

    def on_warning(self, warn: Warn) -> None:
        """Send what must be journaled (a server that died, a restart) to `warn`."""
        for toolset in self.toolsets:
            toolset.warn = warn

    async def aclose(self) -> None:
        """Stop every server: close stdin, wait the grace period, kill."""
        if self.host is not None:
            await self.host.aclose()

    def close(self) -> None:
        """`aclose` for callers without a running loop."""
        if self.host is not None:
            self.host.close()


def start_skills(
    endpoints: Sequence[Endpoint],
    *,
    timeout: float,
    grace: float,
    required_surfaces: Sequence[str] = (),
    log_dir: str | None = None,
) -> Skills:
    """Start every server, discover its tools and check the required surfaces (MCP errors).

    With `log_dir`, each stdio server's stderr goes to `<log_dir>/<surface>.log`
    (created 0700) instead of the runtime's stderr.
    """
    with_las = any(endpoint.is_las for endpoint in endpoints)
    if not endpoints:
        check_required_surfaces([], required_surfaces, with_las=with_las)
        return Skills()
    from singularity.skills.host import SkillHost
    from singularity.skills.toolset import McpToolset

    if log_dir is not None:
        make_log_dir(log_dir)
        endpoints = logging_to(endpoints, log_dir)
    host = SkillHost(endpoints, timeout=timeout, grace=grace)
    try:
        listings = host.open()
    except McpError as error:
        if log_dir is None:
            raise
        note = f"{error.message} (skill servers' stderr is in {log_dir})"
        raise McpError(note, error.retry) from None
    skills = Skills(
        host,
        [
            McpToolset(host, index, endpoint.surface, tools)
            for index, (endpoint, tools) in enumerate(zip(endpoints, listings, strict=True))
        ],
    )
    try:
        check_required_surfaces(skills.tool_names, required_surfaces, with_las=with_las)
    except BaseException:
        skills.close()
        raise
    return skills
