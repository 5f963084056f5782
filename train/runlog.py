"""What `venus train` and `venus train-voice` share on disk: the recipe file read, the
resumable state written atomically, and the history (JSON Lines, one record per step
or checkpoint) cut back to the state's step on a resume. Imports no torch at the top:
the commands read their recipe before they check that torch is installed."""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from venus.errors import VenusError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

__all__ = [
    "append",
    "note_machine",
    "pyplot",
    "read_recipe",
    "same_recipe",
    "save_state",
    "truncate_history",
]

log = logging.getLogger(__name__)


def read_recipe(path: Path, error: type[VenusError]) -> dict[str, Any]:
    """``--config FILE`` as a TOML table; unreadable or invalid: ``error`` naming it."""
    try:
        with path.open("rb") as f:
            table: dict[str, Any] = tomllib.load(f)
            return table
    except OSError as e:
        raise error(f"--config {path}: cannot be read ({e})") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"--config {path}: not valid TOML ({e})") from e


def same_recipe(saved: str, parse: Callable[[dict[str, Any]], object], cfg: object) -> bool:
    """Whether a run's saved recipe text is ``cfg``, compared parsed: a key added since the
    run began reads as its default, so the run still resumes."""
    try:
        return parse(tomllib.loads(saved)) == cfg
    except (tomllib.TOMLDecodeError, VenusError):
        return False


def save_state(path: Path, state: dict[str, Any]) -> None:
    """``state`` to ``path`` whole or not at all (a kill mid-write keeps the last one)."""
    import torch  # here: the recipe readers above run before torch is known to be there

    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def note_machine(work: Path, step: int, device: str) -> None:
    """Append where this start (or resume) of a run trains to ``work/machines.jsonl``: a
    run that does not reproduce bit for bit may have gone on on another processor, torch
    or thread count, and this says which (float sums come out in another order)."""
    import torch

    record = {
        "step": step,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "device": device,
        "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    append(work / "machines.jsonl", record)


def restore(state: dict[str, Any], parts: dict[str, Any], history: Path) -> int:
    """Load each of ``parts`` (state-dict owners; None: not in this run) from ``state`` as
    it was saved, cut ``history`` back to the state's step, and return that step."""
    for name, part in parts.items():
        if part is not None:
            part.load_state_dict(state[name])
    truncate_history(history, state["step"])
    return int(state["step"])


def truncate_history(path: Path, step: int) -> None:
    """Drop history lines past the resumed state's step (steps run after it was saved)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text("utf-8").splitlines()
            if line and json.loads(line)["step"] <= step]  # fmt: skip
    path.write_text("".join(line + "\n" for line in keep), "utf-8")


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend; None (and a warning) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning(
            "matplotlib is not installed: no loss curves (pip install 'realtime-venus[eval]')"
        )
        return None
    return plt
