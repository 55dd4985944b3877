"""The Las aggregator of spec §13: one stdio server whose tools are already namespaced.

Used only when `--las-entrypoint` is given (decision 18). It is started as
`<LAS_COMMAND> <LAS_MCP_ENTRYPOINT>` with the scrubbed environment of §13.2, and its
`initialize` carries the being's `agentId`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from singularity.config import Settings
from singularity.domain.identity import is_identifier
from singularity.errors import McpError
from singularity.skills.endpoints import Endpoint, StdioLaunch
from singularity.skills.environment import las_environment, skarbiec_active

LAS_LABEL = "Las"


def las_endpoint(settings: Settings, runtime_environ: Mapping[str, str]) -> Endpoint | None:
    """The Las endpoint, or None when no entrypoint is configured."""
    if settings.las_entrypoint is None:
        return None
    agent_id = settings.agent_id or None
    if agent_id is not None and not is_identifier(agent_id):
        raise McpError("invalid immutable Las agent identity")
    if agent_id is None and skarbiec_active(settings.las_only, settings.las_skip):
        raise McpError("Skarbiec requires an explicit immutable Las agent identity")
    env = las_environment(
        las_only=settings.las_only,
        las_skip=settings.las_skip,
        release_files={
            "LAS_RELEASE_MANIFEST_FILE": settings.las_release_manifest,
            "LAS_RELEASE_MANIFEST_SIGNATURE_FILE": settings.las_release_manifest_signature,
            "LAS_RELEASE_TRUST_STORE_FILE": settings.las_release_trust_store,
            "LAS_RELEASE_WATERMARK_FILE": settings.las_release_watermark,
        },
        agent_id=agent_id,
        runtime_environ=runtime_environ,
    )
    extra = {"agentId": agent_id} if agent_id is not None else {}
    launch = StdioLaunch((settings.las_command, settings.las_entrypoint), env, None, extra)
    return Endpoint(LAS_LABEL, None, launch)


def missing_surfaces(tool_names: Iterable[str], surfaces: Iterable[str]) -> list[str]:
    """The surfaces no tool name starts `<surface>__` with."""
    names = list(tool_names)
    return [s for s in surfaces if not any(name.startswith(f"{s}__") for name in names)]


def check_required_surfaces(
    tool_names: Iterable[str], surfaces: Iterable[str], *, with_las: bool
) -> None:
    """Fail (MCP class) when a required surface has no tool (spec §13.3 step 3)."""
    missing = missing_surfaces(tool_names, surfaces)
    if missing:
        subject = "Las surface" if with_las else "skill surface"
        raise McpError(f"required {subject} unavailable: {missing[0]}")
