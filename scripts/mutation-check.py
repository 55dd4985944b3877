#!/usr/bin/env python3
"""Mutation check: small deliberate bugs, one at a time; the suite must fail on each.

    .venv/bin/python scripts/mutation-check.py [--all-failures] [NAME-SUBSTRING ...]

Each mutant replaces one exact snippet of `src/` (it must occur exactly once), runs the
tests that should see the bug, names the tests that failed and restores the file, even
when interrupted. A mutant that no test kills is a blind spot of the suite. The tests of
every mutant are first run unmutated: a kill only counts against a green baseline.
Run it on a checkout with nothing else running from it (it edits `src/` while it works).
By default each mutant's run stops at its first failure (`-x`); `--all-failures` runs
its tests to the end and lists every test that failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTEST = [str(REPO / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", "-m", "not slow"]
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)

DURABILITY = ("tests/test_durability.py", "tests/test_fsio.py", "tests/test_operator_inbox.py")
MONEY = ("tests/test_money_property.py",)


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug: `old` becomes `new` in `path`; `tests` should fail."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant(
        "step record (state.redo) appended without fdatasync",
        "src/singularity/store/redo.py",
        'fsio.append_durably(self._fd, record, "redo")',
        "fsio.write_all(self._fd, record)",
        DURABILITY,
    ),
    Mutant(
        "activity.jsonl left unsynced at a checkpoint",
        "src/singularity/store/directory.py",
        "            if fd is None:\n                continue\n",
        "            if fd is None or name == ACTIVITY_FILE:\n                continue\n",
        DURABILITY,
    ),
    Mutant(
        "conversation.jsonl left unsynced at a checkpoint",
        "src/singularity/store/directory.py",
        "            if fd is None:\n                continue\n",
        "            if fd is None or name == ARCHIVE_FILE:\n                continue\n",
        DURABILITY,
    ),
    Mutant(
        "write-once create without directory fsync",
        "src/singularity/storage/fsio.py",
        "            pass\n    fsync_dir(dir_fd, point)\n    return True\n",
        "            pass\n    return True\n",
        DURABILITY,
    ),
    Mutant(
        "new append file without directory fsync",
        "src/singularity/storage/fsio.py",
        "        fsync_dir(dir_fd, point)\n        return fd\n",
        "        return fd\n",
        DURABILITY,
    ),
    Mutant(
        "every cycle raising ValueError",
        "src/singularity/runtime/loop/cycle.py",
        '    """Live one cycle; a gateway error propagates after its reservation is settled."""\n',
        '    """Live one cycle; a gateway error propagates after its reservation is settled."""\n'
        '    raise ValueError("mutant")\n',
        MONEY,
    ),
    Mutant(
        "replace without directory fsync",
        "src/singularity/storage/fsio.py",
        "        raise\n    fsync_dir(dir_fd, point)\n\n\ndef open_append",
        "        raise\n\n\ndef open_append",
        DURABILITY,
    ),
    Mutant(
        "temp file renamed unsynced",
        "src/singularity/storage/fsio.py",
        '            write_all(fd, data)\n            sync(fd, f"{point}.fsync")\n',
        "            write_all(fd, data)\n",
        DURABILITY,
    ),
    Mutant(
        "appends without fdatasync (every appender)",
        "src/singularity/storage/fsio.py",
        '    write_all(fd, data)\n    sync(fd, f"{point}.fsync", data_only=True)\n',
        "    write_all(fd, data)\n",
        DURABILITY,
    ),
    Mutant(
        "conversation archive append without fdatasync",
        "src/singularity/storage/conversation_archive.py",
        'fsio.append_durably(fd, data, "archive")',
        "fsio.write_all(fd, data)",
        (*DURABILITY, "tests/test_state_store.py"),
    ),
    Mutant(
        "reasonlog append without fdatasync",
        "src/singularity/journal/reasonlog.py",
        'fsio.append_durably(fd, (compact(entry) + "\\n").encode("utf-8"), "reasonlog")',
        'fsio.write_all(fd, (compact(entry) + "\\n").encode("utf-8"))',
        DURABILITY,
    ),
    Mutant(
        "new directory without parent fsync",
        "src/singularity/storage/fsio.py",
        "        os.mkdir(name, mode, dir_fd=dir_fd)\n    fsync_dir(dir_fd, point)\n",
        "        os.mkdir(name, mode, dir_fd=dir_fd)\n",
        DURABILITY,
    ),
    Mutant(
        "truncate without fsync",
        "src/singularity/storage/fsio.py",
        '    os.ftruncate(fd, length)\n    sync(fd, f"{point}.truncsync")\n',
        "    os.ftruncate(fd, length)\n",
        (*DURABILITY, "tests/test_activity.py", "tests/test_conversation_window.py"),
    ),
    Mutant(
        "removal without directory fsync",
        "src/singularity/storage/fsio.py",
        "    os.unlink(name, dir_fd=dir_fd)\n    fsync_dir(dir_fd, point)\n\n\ndef move_file",
        "    os.unlink(name, dir_fd=dir_fd)\n\n\ndef move_file",
        (*DURABILITY, "tests/test_sanctum_tools.py"),
    ),
    Mutant(
        "failed temp write left behind",
        "src/singularity/storage/fsio.py",
        "    except BaseException:\n        with contextlib.suppress(OSError):\n"
        "            os.unlink(tmp, dir_fd=dir_fd)\n        raise\n",
        "    except BaseException:\n        raise\n",
        ("tests/test_fsio.py", "tests/test_fatal_io.py", "tests/test_file_tools.py"),
    ),
    Mutant(
        "torn activity line kept at open",
        "src/singularity/store/directory.py",
        "            if scanned.torn_bytes:\n",
        "            if False:\n",
        ("tests/test_state_store.py", "tests/test_activity.py", "tests/test_crash_state.py"),
    ),
    Mutant(
        "a reservation the balance cannot cover is made",
        "src/singularity/runtime/ledger.py",
        "return budget.solvent and budget.remaining >= reservation.total",
        "return budget.solvent",
        MONEY,
    ),
    Mutant(
        "token cost rounded down",
        "src/singularity/runtime/ledger.py",
        "    return round_up(\n        add(\n",
        "    return -round_up(-\n        add(\n",
        MONEY,
    ),
    Mutant(
        "a debit beyond the balance not capped",
        "src/singularity/runtime/ledger.py",
        "    if charge.total <= budget.remaining:\n        return charge\n",
        "    return charge\n",
        MONEY,
    ),
    Mutant(
        "revenue beyond the money range credited",
        "src/singularity/runtime/ledger.py",
        "        return None\n    if amount > credit_room(being.state.budget):\n",
        "        return None\n    if False:\n",
        (*MONEY, "tests/test_money_contract.py"),
    ),
    Mutant(
        "an absolute symlink target resolved inside",
        "src/singularity/tools/confinement.py",
        '                if opened.startswith("/"):\n',
        '                if opened.startswith("//"):\n',
        ("tests/test_confinement.py",),
    ),
    Mutant(
        "a moved directory's `..` followed",
        "src/singularity/tools/confinement.py",
        "                    if _identity(fd) != levels[-1]:\n",
        "                    if False:\n",
        ("tests/test_confinement.py",),
    ),
)


def drop_bytecode(path: Path) -> None:
    """Remove the cached bytecode of `path`, which an edit of the same size may not refresh."""
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink(missing_ok=True)


def run_tests(tests: tuple[str, ...], stop_first: bool) -> tuple[int, list[str], float]:
    """Run `tests`; their exit code, the failed test ids, and the seconds it took."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    done = subprocess.run(
        [*PYTEST, "--tb=no", "-rfE", *(["-x"] if stop_first else []), *tests],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )
    return done.returncode, FAILED.findall(done.stdout), time.monotonic() - start


def check(mutant: Mutant, stop_first: bool) -> str:
    """Apply the mutant, run its tests, restore; one table row."""
    path = REPO / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return f"| {mutant.name} | does not apply (snippet found {original.count(mutant.old)}×) | |"
    try:
        path.write_text(original.replace(mutant.old, mutant.new))
        drop_bytecode(path)
        code, failed, seconds = run_tests(mutant.tests, stop_first)
    finally:
        path.write_text(original)
        drop_bytecode(path)
    if code == 0:
        verdict = "**SURVIVED**"
    elif failed:
        verdict = "killed by " + ", ".join(f"`{name}`" for name in failed)
    else:
        verdict = f"killed (pytest exit {code}, no test named)"
    return f"| {mutant.name} | {verdict} | {seconds:.0f} s |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-failures", action="store_true", help="list every failed test")
    parser.add_argument("names", nargs="*", help="only mutants whose name contains one of these")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.names or any(n in m.name for n in args.names)]
    baseline = tuple(sorted({test for mutant in chosen for test in mutant.tests}))
    code, failed, seconds = run_tests(baseline, stop_first=True)
    if code != 0:
        print(f"the unmutated tests fail ({failed or code}): no mutant can be judged")
        return 1
    print(f"baseline: {len(baseline)} test files pass unmutated ({seconds:.0f} s)\n")
    print("| mutant | verdict | time |\n|---|---|---|", flush=True)
    survived = 0
    for mutant in chosen:
        row = check(mutant, stop_first=not args.all_failures)
        survived += "SURVIVED" in row
        print(row, flush=True)
    print(f"\n{len(chosen) - survived} of {len(chosen)} killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
