"""The `singularity` command as the tests run it: where it is, and an environment without
options, so that a test's process never passes its own configuration on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SINGULARITY = Path(sys.executable).with_name("singularity")
OPTION_PREFIXES = ("SINGULARITY_", "BRAMA_", "LAS_", "MOST_", "WISENT_", "OPENAI_")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any option variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OPTION_PREFIXES)}
    env.update(extra)
    return env


def run_singularity(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`singularity ARGS` in a clean environment, its output captured as text."""
    return subprocess.run(
        [str(SINGULARITY), *args],
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
