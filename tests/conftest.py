"""Shared fixtures and the default marker selection.

The default run leaves out tests marked ``gpu`` (needs an NVIDIA GPU) and ``hw``
(needs a physical device), and ``slow`` ones unless ``VENUS_SLOW=1`` (CI sets it), and
says so in the header and the summary. An explicit ``-m EXPR`` replaces this choice.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from support.services import Broker, PulseServer, run_mosquitto, run_pulseaudio

REPO = Path(__file__).resolve().parent.parent
_EXCLUDED_WHY = {
    "gpu": "needs an NVIDIA GPU; run `scripts/gpu-check` or `pytest -m gpu` on one",
    "hw": "needs a physical microphone, speaker or camera; run `pytest -m hw` on the device",
    "slow": "slow; run with VENUS_SLOW=1 (CI does) or `pytest -m slow`",
}


def _excluded(config: pytest.Config) -> list[str]:
    if config.getoption("markexpr"):
        return []
    out = ["gpu", "hw"]
    if os.environ.get("VENUS_SLOW", "") not in ("1", "true"):
        out.append("slow")
    return out


def pytest_report_header(config: pytest.Config) -> list[str]:
    excluded = _excluded(config)
    if not excluded:
        return [f"marker selection: -m {config.getoption('markexpr')!r}"]
    return ["default run leaves out: " + ", ".join(excluded)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    excluded = set(_excluded(config))
    keep: list[pytest.Item] = []
    dropped: dict[str, int] = {}
    for item in items:
        hit = next((m for m in excluded if item.get_closest_marker(m)), None)
        if hit is None:
            keep.append(item)
        else:
            dropped[hit] = dropped.get(hit, 0) + 1
    if dropped:
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    config.stash[_DROPPED] = dropped
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: tell the controller
        config.workeroutput["dropped"] = dropped


_DROPPED = pytest.StashKey[dict[str, int]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller collects nothing itself: every worker collects the same
    tests, so the first to finish says what the run left out."""
    dropped = getattr(node, "workeroutput", {}).get("dropped")
    if dropped is not None:
        node.config.stash.setdefault(_DROPPED, dropped)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    dropped = config.stash.get(_DROPPED, {})
    for marker, count in sorted(dropped.items()):
        terminalreporter.write_line(
            f"left out {count} test(s) marked {marker}: {_EXCLUDED_WHY[marker]}"
        )


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Take out the stderr handler a test's in-process CLI installed (``setup_logging``)
    and restore the root level. Left in, it writes to that test's captured stream, closed
    by then, and every later log line from a thread (MQTT, the harness, a capability)
    prints a "--- Logging error ---" traceback instead."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository root."""
    return REPO


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """A fresh mosquitto broker on a free loopback port, stopped after the test."""
    with run_mosquitto(tmp_path) as broker:
        yield broker


@pytest.fixture(scope="session")
def pulseaudio() -> Iterator[PulseServer]:
    """A private PulseAudio with a null sink; its variables are set in this process."""
    with run_pulseaudio() as server, pytest.MonkeyPatch.context() as mp:
        for key, value in server.env.items():
            mp.setenv(key, value)
        yield server


@dataclass(frozen=True)
class TinyExport:
    """A tiny checkpoint and its fp32 engines, made as a user makes them."""

    checkpoint: Path
    engines: Path
    run: subprocess.CompletedProcess[str]  # `venus export ckpt --out engines --verify ...`


@contextmanager
def built_once(factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A directory made once per test run, for what takes a minute to build: (it, whether
    it is built already). Under pytest-xdist every worker of the run shares it: the first
    builds it while the others wait on a lock (filelock), then they read what it built.
    Build into it inside the ``with``; it counts as built if the block ends without error."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    base = root / name
    with FileLock(str(root / f"{name}.lock")):
        built = base / ".built"
        if built.exists():
            yield base, True
            return
        shutil.rmtree(base, ignore_errors=True)  # a build that failed before
        base.mkdir()
        yield base, False
        built.touch()


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> TinyExport:
    """`venus init --config tiny --seed 0` then `venus export --verify` (recommending the
    daemon's default sampling), once per run (``built_once``).

    Shared by the export and engines tests (the export takes about a minute on two cores).
    Treat it as read-only: tests that corrupt files work on a copy.
    """
    venus = Path(sys.executable).with_name("venus")
    with built_once(tmp_path_factory, "tiny") as (base, built):
        if not built:

            def run(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run([str(venus), *args], cwd=base, capture_output=True,
                                      text=True, timeout=600, check=False)  # fmt: skip

            init = run("init", "--config", "tiny", "--seed", "0", "--out", "ckpt")
            if init.returncode != 0:
                pytest.fail(f"venus init failed:\n{init.stderr[-4000:]}")
            # the daemon's own defaults as the engines' recommendation: written, and sampled
            # as before
            export = run("export", "ckpt", "--out", "engines", "--verify", "--temperature",
                         "0.7", "--top-p", "0.9", "--flow-temperature", "1.0")  # fmt: skip
            if export.returncode != 0:
                pytest.fail(f"venus export failed:\n{export.stderr[-4000:]}")
            ran = {"args": export.args, "stdout": export.stdout, "stderr": export.stderr}
            (base / "export.json").write_text(json.dumps(ran))
    ran = json.loads((base / "export.json").read_text())
    run = subprocess.CompletedProcess(ran["args"], 0, ran["stdout"], ran["stderr"])
    return TinyExport(base / "ckpt", base / "engines", run)


@pytest.fixture(scope="session")
def scripted_export(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny-audio checkpoint whose weights force a known conversation, exported once
    per run (see ``support/scripted.py``; ``built_once``)."""
    from support.scripted import Scripted, build

    with built_once(tmp_path_factory, "scripted") as (base, built):
        if not built:
            build(base)
    return Scripted(base / "ckpt", base / "engines")
