"""Shared test fixtures and the Hypothesis profiles (see docs/testing.md)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from singularity.journal import minilm
from singularity.storage import fsio
from tests.support import default_model, syncs
from tests.support.brama import brama_serve
from tests.support.early import Early
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


_AWAITS_THE_LIFE = "one_cycle_on_the_default_model"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that await work started with the session run last, so that it overlaps the most.

    Under xdist they run first instead (the worker that gets one starts that work then: no
    worker knows its share of the tests beforehand, `_default_model_started_early`), and
    then the tests given a longer timeout, the long ones: started last, they would run
    on alone while the other workers sit idle.
    """
    if _in_xdist_worker(config):
        items.sort(key=lambda item: (_AWAITS_THE_LIFE not in item.fixturenames, -_timeout(item)))
    else:
        items.sort(key=lambda item: _AWAITS_THE_LIFE in item.fixturenames)


def _timeout(item: pytest.Item) -> float:
    """The test's `@pytest.mark.timeout`, else the configured one."""
    marked = item.get_closest_marker("timeout")
    if marked is not None and marked.args:
        return float(marked.args[0])
    return float(item.config.getini("timeout") or 0)


def _in_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


_SESSION_ENVIRON = pytest.StashKey[dict[str, str]]()


@pytest.fixture(scope="session", autouse=True)
def _default_model_started_early(request: pytest.FixtureRequest) -> None:
    """When the session has tests on the default model, its gateway starts with the session,
    and the default tier's one-cycle life as soon as the gateway answers (`support/early.py`).

    Both run with the environment and working directory the session started with, not
    those a test running meanwhile has set. An xdist worker starts them only when it gets
    a test that uses them: every worker collects every test, so starting them here would
    start one model per worker.
    """
    request.config.stash[_SESSION_ENVIRON] = dict(os.environ)
    if _in_xdist_worker(request.config):
        return
    wanted = {name for item in request.session.items for name in item.fixturenames}
    if _AWAITS_THE_LIFE in wanted:
        request.getfixturevalue("_one_cycle_life")
    elif "default_gateway" in wanted:
        request.getfixturevalue("_default_gateway_process")


@pytest.fixture(scope="session")
def _default_gateway_process(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Early[str]]:
    """`singularity brama serve` with its defaults (the default model), one per session.

    Its prompts are kept in the session's temporary directory, so that every test on the
    default model shares what an earlier one evaluated, and no run depends on another's.
    """
    environ = request.config.stash[_SESSION_ENVIRON]
    folder = tmp_path_factory.mktemp("brama-default")
    with contextlib.ExitStack() as running:
        gateway = Early(
            "default gateway",
            lambda: running.enter_context(brama_serve(folder / "brama.log", env=environ)),
        )
        yield gateway
        gateway.wait()


@pytest.fixture(scope="session")
def _one_cycle_life(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    _default_gateway_process: Early[str],
) -> Iterator[Early[Any]]:
    """The default tier's one-cycle life, started as soon as the gateway answers."""
    environ = request.config.stash[_SESSION_ENVIRON]
    root = tmp_path_factory.mktemp("one-cycle-on-the-default-model")
    life = Early(
        "one cycle on the default model",
        lambda: default_model.live(
            _default_gateway_process.result(), root, *default_model.ONE_CYCLE, environ=environ
        ),
    )
    yield life
    life.wait()  # before the gateway stops


@pytest.fixture(scope="session")
def default_gateway(_default_gateway_process: Early[str]) -> str:
    """The base URL of the session's `singularity brama serve` on the default model."""
    return _default_gateway_process.result()


@pytest.fixture(scope="session")
def one_cycle_on_the_default_model(_one_cycle_life: Early[Any]) -> Any:
    """The saved state of the default tier's one-cycle life (`default_model.ONE_CYCLE`)."""
    return _one_cycle_life.result()


@pytest.fixture
def changed_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The journal's model file with one byte changed, in place of the installed one (the
    process's loaded model is dropped before and after)."""
    minilm.cached_model.cache_clear()
    yield change_model(tmp_path, monkeypatch)
    minilm.cached_model.cache_clear()
