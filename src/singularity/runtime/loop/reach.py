"""Nothing the being can write configures its runtime (decision 31).

The being writes its workspace. A configuration file, a skills file, a secret or key
file, the journal's key or database, or a program the runtime starts for a skill server,
found inside the workspace (or reached through it, by a symlink at any step of the path)
would let the being set its own prices, run its own commands outside the workspace or
read its own credentials; each is refused at boot with the option that names it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence

from singularity.config import Settings
from singularity.errors import ConfigurationError
from singularity.journal.store import is_postgres, sqlite_path
from singularity.skills.endpoints import Endpoint, StdioLaunch

MAX_LINKS = 40


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def reaches_into(path: str, root: str) -> bool:
    """Whether resolving `path` passes through the directory `root` at any step.

    The path is resolved one component at a time, following each symlink (the being may
    retarget one inside the workspace later), so a path that only reaches the workspace
    through a link counts as well as one that names it. `root` must be canonical.
    """
    # Not normalised: `..` is taken after the links before it, as the kernel takes it.
    pending = os.path.join(os.getcwd(), path).split("/")[1:]
    current = "/"
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if _inside(candidate, root):
            return True
        try:
            target = os.readlink(candidate)
        except OSError:  # not a link, or missing: nothing further is followed from here
            current = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            return False  # a loop: the path names nothing the being could write
        if os.path.isabs(target):
            current = "/"
        pending = target.split("/") + pending
    return _inside(current, root)


def _configured_files(settings: Settings) -> Iterator[tuple[str, str]]:
    """(what, path) of every file the settings read as configuration, credentials or keys."""
    named = (
        ("config file", settings.config_file),
        ("skills file", settings.skills_file),
        ("Brama secret file", settings.brama_secret_file),
        ("Brama API key file", settings.brama_api_key_file),
        ("Most token file", settings.most_token_file),
        ("journal key file", settings.journal_key_file),
        ("LAS entrypoint", settings.las_entrypoint),
        ("LAS release manifest", settings.las_release_manifest),
        ("LAS release manifest signature", settings.las_release_manifest_signature),
        ("LAS release trust store", settings.las_release_trust_store),
        ("LAS release watermark", settings.las_release_watermark),
    )
    for what, path in named:
        if path:
            yield what, path
    if not is_postgres(settings.journal_url):
        yield "journal database", sqlite_path(settings.journal_url, settings.state_dir)


def _program(launch: StdioLaunch) -> str | None:
    program = launch.argv[0] if launch.argv else ""
    if "/" in program:
        return os.path.join(launch.cwd or os.getcwd(), program)
    return shutil.which(program, path=launch.env.get("PATH", os.defpath))


def _launched_files(endpoints: Sequence[Endpoint]) -> Iterator[tuple[str, str]]:
    """(what, path) of each program a skill server runs, and each existing file it is given."""
    for endpoint in endpoints:
        launch = endpoint.launch
        if not isinstance(launch, StdioLaunch):
            continue
        program = _program(launch)
        if program is not None:
            yield f"program of {endpoint.label}", program
        for argument in launch.argv[1:]:
            path = os.path.join(launch.cwd or os.getcwd(), argument)
            if os.path.isfile(path):
                yield f"file given to {endpoint.label}", path


def check_out_of_reach(
    settings: Settings, workspace_root: str, endpoints: Sequence[Endpoint] = ()
) -> None:
    """Refuse every configured file the being could write through its workspace."""
    root = os.path.realpath(workspace_root)
    for what, path in (*_configured_files(settings), *_launched_files(endpoints)):
        if reaches_into(path, root):
            raise ConfigurationError(
                f"the {what} {path} is inside the workspace {root}, which the being can "
                "write; keep it outside"
            )
