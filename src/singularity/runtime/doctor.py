"""`singularity doctor`: a read-only pre-flight of everything a being depends on (spec §17)."""

from __future__ import annotations

from typing import Any

from singularity.config import Settings
from singularity.errors import ConfigurationError, MostError
from singularity.gateway.client import BramaClient
from singularity.most.client import MostClient
from singularity.runtime.lifecycle import gateway_auth
from singularity.settings_check import check_runtime
from singularity.skills import plan_skills, start_skills
from singularity.tools.model_tool import SELECTORS, TASK_PREFIX

DOCTOR_SELECTORS = (*SELECTORS,)  # `best` is accepted too (decision 4)


async def doctor(settings: Settings) -> dict[str, Any]:
    """Check the gateway, Most and every skill server as `run` would; writes no being state."""
    credentials = check_runtime(settings)
    endpoints = plan_skills(settings)
    model = settings.brama_model
    async with BramaClient(
        settings.brama_url,
        agent_id=settings.agent_id,
        auth=gateway_auth(credentials),
        timeout=settings.http_timeout_secs,
    ) as gateway:
        await gateway.health()
        selector = model in DOCTOR_SELECTORS or model.startswith(TASK_PREFIX)
        if not selector and model not in await gateway.models():
            raise ConfigurationError(f"configured Brama model is unavailable: {model}")
    most = None
    if credentials.most_token is not None:
        client = MostClient(
            settings.most_url, credentials.most_token, timeout=settings.http_timeout_secs
        )
        try:
            most = await client.health()
        finally:
            await client.aclose()
        backends = most.get("backends")
        if not backends or backends == "none":
            raise MostError("Most has no send-capable backend")
    skills = start_skills(
        endpoints,
        timeout=settings.mcp_timeout_secs,
        grace=settings.shutdown_grace_secs,
        required_surfaces=settings.required_surface_list,
    )
    try:
        tool_count = len(skills.tool_names)
    finally:
        await skills.aclose()
    return {"brama_model": model, "las_tools": tool_count, "most": most, "ok": True}
