"""The scrubbed environment a stdio skill server starts with (spec §13.2, decision 18).

A server never inherits the runtime's environment: it starts from nothing but a fixed
`PATH` and a UTF-8 locale, plus exactly what its configuration names. The Las
aggregator also gets its `LAS_*` settings and, when Skarbiec is active, the `SKARBIEC_*`
variables present in the runtime's environment and the agent id.
"""

from __future__ import annotations

from collections.abc import Mapping

SAFE_PATH = "/usr/bin:/bin:/usr/sbin:/sbin:/opt/homebrew/bin:/usr/local/bin"
SKARBIEC_PASSTHROUGH = (
    "SKARBIEC_CAP_POLICY",
    "SKARBIEC_CAP_POLICY_SIG",
    "SKARBIEC_CAP_TRUST_ROOT",
    "SKARBIEC_WORKLOAD_REGISTRY",
    "SKARBIEC_WORKLOAD_REGISTRY_SIG",
    "SKARBIEC_CAP_STATE",
    "SKARBIEC_CAP_SOCKET",
    "SKARBIEC_WORM_RECEIPT_DIR",
    "SKARBIEC_WORM_CHECKPOINT",
    "SKARBIEC_WORM_RECEIPT_COMMAND",
)
SKARBIEC_AGENT_ID = "SKARBIEC_MCP_AGENT_ID"


def base_environment() -> dict[str, str]:
    """What every stdio server gets: a fixed `PATH` and the C.UTF-8 locale."""
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def server_environment(named: Mapping[str, str]) -> dict[str, str]:
    """The base set plus exactly the variables a server's configuration names."""
    return {**base_environment(), **named}


def _csv(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def skarbiec_active(las_only: str, las_skip: str | None) -> bool:
    """Whether Las serves Skarbiec: `LAS_ONLY` blank or listing it, `LAS_SKIP` not."""
    only = _csv(las_only)
    return (not only or "skarbiec" in only) and "skarbiec" not in _csv(las_skip)


def las_environment(
    *,
    las_only: str,
    las_skip: str | None,
    release_files: Mapping[str, str | None],
    agent_id: str | None,
    runtime_environ: Mapping[str, str],
) -> dict[str, str]:
    """The Las child's environment, exactly as §13.2 lists it."""
    env = base_environment()
    env["LAS_ONLY"] = las_only
    env.update({name: path for name, path in release_files.items() if path is not None})
    if las_skip is not None:
        env["LAS_SKIP"] = las_skip
    if skarbiec_active(las_only, las_skip):
        env.update(
            {
                name: runtime_environ[name]
                for name in SKARBIEC_PASSTHROUGH
                if name in runtime_environ
            }
        )
        if agent_id is not None:
            # Set from the identity, never inherited: an ambient value would be overridden.
            env[SKARBIEC_AGENT_ID] = agent_id
    return env
