"""What boot builds a being from: its gateway client, its toolsets in catalogue order
(spec §10.1) and its built-in parts (the sanctum, the private journal, the model menu)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from singularity.config import Settings
from singularity.domain import events
from singularity.gateway.auth import Auth
from singularity.gateway.client import BramaClient
from singularity.journal.extension import journal_extension
from singularity.most.client import MostClient
from singularity.most.tools import most_tools
from singularity.runtime.being import LiveBeing
from singularity.runtime.family.children import Starter, spawn_child_tools
from singularity.runtime.loop.extension import Extension
from singularity.runtime.loop.operator import OperatorDesk
from singularity.runtime.loop.preflight import Preflight
from singularity.runtime.loop.sanctum import sanctum_extension
from singularity.secrets import Scrubber
from singularity.settings_check import Credentials
from singularity.skills import Skills, start_skills
from singularity.tools.base import FunctionToolset, Toolset
from singularity.tools.catalogue import Catalogue
from singularity.tools.confinement import Workspace
from singularity.tools.files import file_tools
from singularity.tools.model_menu import ModelMenu
from singularity.tools.model_tool import ModelLister, switch_model_tools
from singularity.tools.output_boundary import OutputBoundary
from singularity.tools.self_tools import memory_and_self_tools

LOGS_DIR = "logs"
"""Skill servers' stderr, one file per server (decision 25)."""


def gateway_auth(credentials: Credentials) -> Auth:
    """The gateway authentication the credentials call for: HMAC, bearer, both or none
    (decision 5)."""
    return Auth(hmac_secret=credentials.brama_secret, bearer_token=credentials.brama_api_key)


def builtin_toolsets(
    being: LiveBeing,
    settings: Settings,
    gateway: BramaClient,
    workspace: Workspace,
    desk: OperatorDesk | None = None,
    start_child: Starter | None = None,
) -> list[Toolset]:
    """The built-ins in catalogue order (spec §10.1)."""
    state = being.state
    review = desk.propose if desk is not None and settings.review_self_edits else None
    return [
        memory_and_self_tools(state, being.clock, review),
        switch_model_tools(state, gateway.models),
        spawn_child_tools(being, settings, start_child),
        FunctionToolset(file_tools(workspace)),
    ]


def default_extensions(
    being: LiveBeing, settings: Settings, list_models: ModelLister
) -> list[Extension]:
    """The built-in parts every being has unless a caller names its own: the sanctum, the
    private journal, and last the models it may switch to (`list_models`: the gateway's)."""
    journal = journal_extension(being, settings)
    return [sanctum_extension(being, settings), journal, ModelMenu(list_models)]


@dataclass
class Assembly:
    """A booted being's gateway client and tools; its skills and Most close at shutdown."""

    gateway: BramaClient
    skills: Skills
    most: MostClient | None
    parts: list[Extension]
    catalogue: Catalogue


def assemble(
    being: LiveBeing,
    settings: Settings,
    checked: Preflight,
    workspace: Workspace,
    scrubber: Scrubber,
    desk: OperatorDesk,
    *,
    extra_toolsets: Callable[[LiveBeing], list[Toolset]] | None,
    extensions: Callable[[LiveBeing], Sequence[Extension]] | None,
    start_child: Starter | None,
) -> Assembly:
    """Build the gateway client, start the skill servers, and make the catalogue: skills,
    `extra_toolsets`, Most, the built-ins, then the parts' tools (by default
    `default_extensions`). The skill servers are closed again if anything after them fails."""
    credentials = checked.credentials
    gateway = BramaClient(
        settings.brama_url,
        agent_id=settings.agent_id,
        auth=gateway_auth(credentials),
        timeout=settings.http_timeout_secs,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        scrubber=scrubber,
        tool_choice=settings.brama_tool_choice,
    )
    skills = start_skills(
        checked.endpoints,
        timeout=settings.mcp_timeout_secs,
        grace=settings.shutdown_grace_secs,
        required_surfaces=settings.required_surface_list,
        log_dir=os.path.join(settings.state_dir, LOGS_DIR),
    )
    try:
        skills.on_warning(
            lambda text: being.journal(events.Warned(being.now(), being.state.cycle, text))
        )
        toolsets: list[Toolset] = list(skills.toolsets)
        toolsets += list(extra_toolsets(being)) if extra_toolsets else []
        most = None
        if credentials.most_token is not None:
            most = MostClient(
                settings.most_url, credentials.most_token, timeout=settings.http_timeout_secs
            )
            toolsets.append(most_tools(most))
        toolsets += builtin_toolsets(being, settings, gateway, workspace, desk, start_child)
        if extensions is None:
            parts = default_extensions(being, settings, gateway.models)
        else:
            parts = list(extensions(being))
        for part in parts:
            toolsets += part.toolsets()
        catalogue = Catalogue(toolsets, boundary=OutputBoundary.from_settings(settings))
    except BaseException:
        skills.close()
        raise
    return Assembly(gateway, skills, most, parts, catalogue)
