"""The checks a boot makes before it touches a being, shared by `run`, `once` and `doctor`.

`preflight` runs them in order and raises the first failure, as a boot must; `BOOT_STEPS`
names each one so that `doctor` can run them all and report every failure. A
configuration `doctor` passes is one `run` accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from singularity.config import Settings
from singularity.runtime.loop.reach import check_out_of_reach
from singularity.runtime.loop.sanctum import check_sanctum
from singularity.settings_check import RUNTIME_STEPS, Credentials, Step, check_runtime
from singularity.settings_check import workspace_root as workspace_root_of
from singularity.skills import plan_skills
from singularity.skills.endpoints import Endpoint
from singularity.tools.confinement import check_disjoint


@dataclass(frozen=True)
class Preflight:
    """What the checks established: the secrets, the workspace, the skill servers."""

    credentials: Credentials
    workspace_root: str
    endpoints: Sequence[Endpoint]


def _disjoint(settings: Settings) -> None:
    check_disjoint(workspace_root_of(settings), settings.state_dir)


def _sanctum(settings: Settings) -> None:
    check_sanctum(settings, workspace_root_of(settings))


def _out_of_reach(settings: Settings) -> None:
    check_out_of_reach(settings, workspace_root_of(settings), plan_skills(settings))


BOOT_STEPS: tuple[Step, ...] = (
    *RUNTIME_STEPS,
    ("workspace and state directory", _disjoint),
    ("sanctum", _sanctum),
    ("skills", plan_skills),
    ("files out of the being's reach", _out_of_reach),
)


def preflight(settings: Settings) -> Preflight:
    """Every check of a boot, in order; the first failure is raised."""
    credentials = check_runtime(settings)
    root = workspace_root_of(settings)
    _disjoint(settings)
    _sanctum(settings)
    endpoints = plan_skills(settings)
    check_out_of_reach(settings, root, endpoints)
    return Preflight(credentials, root, endpoints)
