"""Shared test fixtures and the Hypothesis profiles (see docs/testing.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from singularity.journal import minilm
from singularity.storage import fsio
from tests.support import syncs
from tests.support.brama import brama_serve
from tests.support.journal import change_model
from tests.support.loop_http import Result, make_cli

# `ci` (the default): the same examples on every run and no verdict from the clock, so a
# loaded machine never fails a property test. `explore`: fresh random examples each run.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "explore", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _private_umask() -> Iterator[None]:
    """Tests run with a permissive umask so permission code is really exercised."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture(autouse=True)
def _disarmed_failpoints() -> Iterator[None]:
    """No failpoint armed by one test survives into the next."""
    yield
    fsio.arm_failpoints("")


@pytest.fixture
def sync_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[syncs.SyncLog]:
    """Every `fsio.sync` of this test, recorded (`sync_log.watch(...)` adds the checks)."""
    log = syncs.install(monkeypatch)
    yield log
    log.close()


@pytest.fixture
def cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """`singularity` run in-process in `tmp_path` (`cli("once", ...)`): code, stdout, stderr."""
    return make_cli(tmp_path, monkeypatch, capsys)


@pytest.fixture(scope="session")
def default_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`singularity brama serve` with its defaults (the default model): one per session.

    Its prompts are kept in the session's temporary directory, so that every test on the
    default model shares what an earlier one evaluated, and no run depends on another's.
    """
    with brama_serve(tmp_path_factory.mktemp("brama-default") / "brama.log") as url:
        yield url


@pytest.fixture
def changed_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The journal's model file with one byte changed, in place of the installed one (the
    process's loaded model is dropped before and after)."""
    minilm.cached_model.cache_clear()
    yield change_model(tmp_path, monkeypatch)
    minilm.cached_model.cache_clear()
