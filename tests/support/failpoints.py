"""Failpoints in a child process: the environment that arms them at interpreter start.

In this process, arm with `fsio.arm_failpoints(spec)` (the autouse fixture disarms after
each test). A child process (`singularity run`, a worker script) gets them with
`armed_environment(spec)`: `failpoint_site/` first on `PYTHONPATH`, whose
`sitecustomize` arms `SINGULARITY_TEST_FAILPOINTS` before any other code runs. The
variable is inherited, so a being's own children are armed too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "failpoint_site"
VARIABLE = "SINGULARITY_TEST_FAILPOINTS"


def armed_environment(spec: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the failpoints `spec` armed."""
    env = dict(os.environ if base is None else base)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{SITE_DIR}{os.pathsep}{path}" if path else str(SITE_DIR)
    env[VARIABLE] = spec
    return env
