"""``venus doctor``'s result type and system checks: ONNX Runtime providers, GPU, engines,
the memory file.

Each check is a small function returning a frozen :class:`Check`; it catches what its
part can throw and reports it (status, one-line summary, details, and the fix). The
device checks are in ``doctor_devices``, the broker's in ``doctor_broker``; the runner,
timeouts and output in ``doctor``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from venus.daemon.config.schema import MemoryConfig, ModelConfig, Provider
from venus.errors import EngineError, MemoryStoreError

Status = Literal["ok", "warn", "fail", "skipped"]

NVIDIA_SMI_TIMEOUT_S = 5.0
JETSON_RELEASE = Path("/etc/nv_tegra_release")
DEVICE_TREE_MODEL = Path("/proc/device-tree/model")


@dataclass(frozen=True)
class Check:
    """One check's outcome. ``fix`` says what to do when the status is warn or fail."""

    name: str
    status: Status
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    fix: str = ""


def check_providers(requested: Sequence[Provider]) -> Check:
    """The ONNX Runtime execution providers offered, and which of ``requested`` will run."""
    try:
        import onnxruntime as ort

        from venus.engines.providers import ORT_PROVIDERS

        offered = [str(p) for p in ort.get_available_providers()]
        version = str(ort.__version__)
    except ImportError as e:
        return Check(
            "providers",
            "fail",
            f"onnxruntime cannot be imported: {e}",
            fix="reinstall venus (`pip install realtime-venus`) or onnxruntime",
        )
    usable = [p for p in dict.fromkeys(requested) if ORT_PROVIDERS[p] in offered]
    missing = [p for p in dict.fromkeys(requested) if ORT_PROVIDERS[p] not in offered]
    details = {
        "onnxruntime": version,
        "available": offered,
        "requested": list(requested),
        "will_use": usable,
    }
    summary = f"{', '.join(offered)}; uses {' -> '.join(usable) or 'nothing'}"
    if missing:
        summary += f" ({', '.join(missing)} not in this onnxruntime)"
    if not usable:
        return Check(
            "providers",
            "fail",
            summary,
            details,
            fix='add "cpu" to engines.providers, or install onnxruntime-gpu',
        )
    if "cuda" in missing and nvidia_present():
        return Check(
            "providers",
            "warn",
            summary,
            details,
            fix="this machine has an NVIDIA GPU but onnxruntime lacks CUDA: replace "
            "onnxruntime with onnxruntime-gpu (`pip install realtime-venus[gpu]`)",
        )
    return Check("providers", "ok", summary, details)


def nvidia_present() -> bool:
    """A cheap guess: nvidia-smi on PATH or a Jetson release file."""
    return shutil.which("nvidia-smi") is not None or JETSON_RELEASE.exists()


def check_gpu() -> Check:
    """NVIDIA GPUs from nvidia-smi, else a Jetson's model and L4T release, else none."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        return _nvidia_smi(smi)
    if JETSON_RELEASE.exists() or _device_tree_model().startswith("NVIDIA"):
        model = _device_tree_model() or "NVIDIA Jetson"
        release = _read_text(JETSON_RELEASE).splitlines()[:1]
        details = {"model": model, "l4t": release[0].lstrip("# ") if release else ""}
        l4t = f" ({details['l4t']})" if details["l4t"] else ""
        return Check("gpu", "ok", f"{model}{l4t}", details)
    return Check(
        "gpu",
        "warn",
        "no NVIDIA GPU (no nvidia-smi, not a Jetson)",
        {},
        fix="the tiny model runs on the CPU; real-size engines need an NVIDIA GPU "
        "with its driver (`nvidia-smi` must work)",
    )


def _nvidia_smi(smi: str) -> Check:
    fields = ["name", "driver_version", "memory.total", "compute_cap"]
    try:
        out = _query(smi, fields)
        if out.returncode != 0:  # older drivers do not know compute_cap
            fields = fields[:3]
            out = _query(smi, fields)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(
            "gpu",
            "fail",
            f"nvidia-smi did not answer: {e}",
            fix="check the NVIDIA driver: `nvidia-smi` must list the GPU",
        )
    if out.returncode != 0:
        message = (out.stderr or out.stdout).strip().splitlines()[:1]
        return Check(
            "gpu",
            "fail",
            f"nvidia-smi failed: {message[0] if message else out.returncode}",
            fix="check the NVIDIA driver: `nvidia-smi` must list the GPU",
        )
    gpus = [
        dict(zip(fields, (v.strip() for v in line.split(",")), strict=False))
        for line in out.stdout.strip().splitlines()
        if line.strip()
    ]
    if not gpus:
        return Check(
            "gpu",
            "fail",
            "nvidia-smi lists no GPU",
            fix="check the NVIDIA driver: `nvidia-smi` must list the GPU",
        )
    first = gpus[0]
    cap = f", compute {first['compute_cap']}" if "compute_cap" in first else ""
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    summary = (
        f"{first['name']}, {first['memory.total']} MiB, driver {first['driver_version']}{cap}{more}"
    )
    return Check("gpu", "ok", summary, {"gpus": gpus})


def _query(smi: str, fields: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=NVIDIA_SMI_TIMEOUT_S,
        check=False,
    )


def _device_tree_model() -> str:
    return _read_text(DEVICE_TREE_MODEL).rstrip("\x00").strip()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def check_engines(model: ModelConfig, hashes: bool = False) -> Check:
    """``model.engines``: the manifest loads and every file has its size (and sha256)."""
    from venus.daemon.frontend.sampling import sampling_of
    from venus.engines.manifest import load_manifest, sha256_file, verify

    root = model.engines
    export = f"build them with `venus export CHECKPOINT --out {root}`, or set model.engines"
    if not root.is_dir():
        what = "not a directory" if root.exists() else "not found"
        return Check("engines", "fail", f"{root}: {what}", {"path": str(root)}, fix=export)
    try:
        manifest = load_manifest(root)
        verify(root, manifest, sha256_file if hashes else None)
    except (EngineError, OSError) as e:
        return Check(
            "engines",
            "fail",
            str(e),
            {"path": str(root)},
            fix=f"re-run `venus export CHECKPOINT --out {root}`",
        )
    files = [entry for _, entry in manifest.files()]  # the graphs and the tokenizer
    size_gb = sum(f.bytes for f in files) / 1e9
    details = {
        "path": str(root),
        "model": manifest.model,
        "frontend": manifest.frontend,
        "precision": manifest.precision,
        "backend": manifest.backend,
        "components": sorted(manifest.components),
        "files": len(files),
        "bytes": sum(f.bytes for f in files),
        "sha256_checked": hashes,
    }
    how = sampling_of(model, manifest)
    details["sampling"] = dataclasses.asdict(how)
    details["trained_step"] = (manifest.trained or {}).get("step")
    checked = "sizes and sha256 match" if hashes else "sizes match; --hashes also checks sha256"
    trained = "untrained" if details["trained_step"] is None else "trained"
    summary = (
        f"{manifest.model} ({manifest.frontend}, {manifest.precision} {manifest.backend}, "
        f"{trained}), {len(files)} files, {size_gb:.2f} GB: {checked}; sampling "
        f"{how.describe()}"
    )
    if model.frontend not in ("auto", manifest.frontend):
        return Check(
            "engines",
            "fail",
            f"{summary}; but model.frontend = {model.frontend!r}",
            details,
            fix=f'set model.frontend = "auto" (or "{manifest.frontend}")',
        )
    return Check("engines", "ok", summary, details)


def check_memory(memory: MemoryConfig, journal: Path) -> Check:
    """The long-session memory file (``[memory] persist``): readable, private. Never
    creates it: a missing file is fine (written at the first save) if its folder is."""
    from venus.daemon.memory.persist import MemoryFile, memory_path

    if not memory.enabled:
        return Check("memory", "ok", "off (memory.enabled = false)")
    if not memory.persist:
        return Check("memory", "ok", f"in RAM only, {memory.budget_mb:g} MiB (persist = false)")
    path = memory_path(memory.path, journal)
    details: dict[str, Any] = {"path": str(path)}
    if not path.exists():
        folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
        if folder is None or not os.access(folder, os.W_OK | os.X_OK):
            return Check(
                "memory",
                "warn",
                f"{path} does not exist and {folder} is not writable",
                details,
                fix=f"create {path.parent} writable by the daemon's user, or set memory.path",
            )
        return Check("memory", "ok", f"no file yet at {path} (written at the first save)", details)
    try:
        with MemoryFile(path) as file:
            sessions = file.sessions()
    except MemoryStoreError as e:
        return Check(
            "memory",
            "fail",
            f"{path} cannot be read",
            {**details, "error": str(e)},
            fix="move it aside, or delete it: `venus memory wipe --file-gone` (the daemon "
            "runs without persistence until then)",
        )
    details["sessions"] = [
        {"id": info.id, "entries": count, "bytes": size, "ended": info.ended_at is not None}
        for info, count, size in sessions
    ]
    summary = f"{path}: {len(sessions)} session(s), {path.stat().st_size} bytes"
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        return Check(
            "memory",
            "warn",
            f"{summary}; readable by others (mode {mode:o})",
            details,
            fix=f"chmod 600 {path} (it holds embeddings of what the camera saw)",
        )
    return Check("memory", "ok", summary, details)
