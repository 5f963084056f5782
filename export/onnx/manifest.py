"""Build ``manifest.json`` (format: ``venus.engines.manifest``) for an exported directory.

Each component's inputs and outputs are read back from its saved ONNX graph, so the
manifest describes what was written, not what was meant. The source checkpoint's hash
is the sha256 of a ``sha256sum``-style listing (``<sha256>  <file>`` lines) of its
``config.json``, its index and every shard, in that order (shards sorted by name).
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import onnx

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (JetPack 6)
    import tomli as tomllib

from venus.engines.manifest import (
    FORMAT,
    FORMAT_VERSION,
    Backend,
    ComponentEntry,
    FileEntry,
    Manifest,
    Precision,
    Sampling,
    Schedule,
    TensorSpec,
    file_entry,
    sha256_file,
)
from venus.errors import ExportError
from venus.export.checkpoint import INDEX, read_index
from venus.export.model.config import CONTROL_TOKENS, ModelConfig
from venus.export.onnx.exporter import OPSET
from venus.export.onnx.specs import KVLayout

TOOLS = ("realtime-venus", "torch", "onnx", "onnxruntime", "onnxscript", "onnx-ir")


def tensor_specs(values: Any) -> tuple[TensorSpec, ...]:
    """Graph inputs or outputs (``ValueInfoProto``s) -> name, numpy dtype, shape."""
    out = []
    for v in values:
        tensor = v.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        shape = tuple(d.dim_param or d.dim_value for d in tensor.shape.dim)
        out.append(TensorSpec(name=v.name, dtype=dtype, shape=shape))
    return tuple(out)


def component_entry(
    root: Path, files: list[str], precision: Precision, kv: KVLayout | None
) -> ComponentEntry:
    graph = onnx.load(str(root / files[0]), load_external_data=False)
    return ComponentEntry(
        files=tuple(file_entry(root, f) for f in files),
        inputs=tensor_specs(graph.graph.input),
        outputs=tensor_specs(graph.graph.output),
        precision=precision,
        layers=kv.layers if kv else None,
        kv_heads=kv.kv_heads if kv else None,
        head_dim=kv.head_dim if kv else None,
    )


def checkpoint_sha256(root: Path) -> str:
    weight_map, _ = read_index(root)
    files = ["config.json", INDEX, *sorted(set(weight_map.values()))]
    listing = "".join(f"{sha256_file(root / f)}  {f}\n" for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def tool_versions() -> dict[str, str]:
    out = {}
    for name in TOOLS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def schedule(cfg: ModelConfig) -> Schedule:
    vision = cfg.vision
    return Schedule(
        chunk_s=cfg.chunk_s,
        sample_rate_in=cfg.audio.sample_rate,
        hop_length=cfg.audio.hop_length,
        n_mels=cfg.audio.n_mels,
        mel_frames=cfg.mel_frames_per_chunk,
        audio_tokens=cfg.audio_tokens_per_chunk,
        vision_tokens=vision.queries if vision else 0,
        image_size=vision.image_size if vision else 0,
        speech_tokens=cfg.speech_tokens_per_chunk,
        speech_codebook=cfg.speech.codebook,
        speech_end_token=cfg.speech.end_token,
        speech_start_token=cfg.speech.start_token,
        mel_frames_out=cfg.flow.frames_per_token,
        lookahead_tokens=cfg.flow.lookahead_tokens,
        prompt_frames=cfg.flow.prompt_frames,
        sample_rate_out=cfg.vocoder.sample_rate,
        hop_out=cfg.vocoder.hop,
    )


def build_manifest(
    cfg: ModelConfig,
    checkpoint: Path,
    components: dict[str, ComponentEntry],
    precision: Precision,
    backend: Backend = "onnx",
    tokenizer: FileEntry | None = None,
    sampling: Sampling | None = None,
) -> Manifest:
    return Manifest(
        format=FORMAT,
        version=FORMAT_VERSION,
        model=cfg.name,
        frontend=cfg.frontend,
        precision=precision,
        backend=backend,
        opset=OPSET,
        special_tokens=cfg.special_token_ids,
        control_tokens=CONTROL_TOKENS,
        schedule=schedule(cfg),
        components=components,
        source={"path": str(checkpoint.resolve()), "sha256": checkpoint_sha256(checkpoint)},
        tools=tool_versions(),
        model_config=json.loads((checkpoint / "config.json").read_text()),
        tokenizer=tokenizer,
        trained=training_record(checkpoint),
        sampling=sampling,
    )


KEPT_FIGURES = ("control_accuracy", "control_chance", "turn_accuracy", "text_accuracy",
                "opening_accuracy", "speech_accuracy", "speech_closed_accuracy",
                "heard_cer")  # fmt: skip


def training_record(checkpoint: Path) -> dict[str, Any] | None:
    """What the engines' manifest says of how ``checkpoint`` was trained: ``venus train``
    leaves CKPT/train/metrics.json (the step, its validation and, after ``--init``, what
    it started from) and recipe.toml; without them (``venus init``, a converted upstream
    model) None. ``beside``: for a run's last step written beside the step its
    ``train.keep`` held (CKPT/last), the held step. Unreadable files are named."""
    metrics, recipe = checkpoint / "train" / "metrics.json", checkpoint / "train" / "recipe.toml"
    if not metrics.is_file():
        return None
    try:
        doc = json.loads(metrics.read_text("utf-8"))
        step, validation = int(doc["step"]), dict(doc["validation"])
        beside = None if doc.get("beside") is None else int(doc["beside"])
        voice = _voice_record(doc.get("voice"))
        figures = {k: round(float(validation[k]), 4) for k in KEPT_FIGURES if k in validation}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{metrics}: cannot be read as venus train's record ({e})") from e
    settings: dict[str, Any] = {}
    if recipe.is_file():
        try:
            settings = tomllib.loads(recipe.read_text("utf-8"))
            train, model = dict(settings.get("train", {})), dict(settings.get("model", {}))
        except (OSError, ValueError, TypeError, tomllib.TOMLDecodeError) as e:
            raise ExportError(f"{recipe}: cannot be read as venus train's recipe ({e})") from e
    else:
        train, model = {}, {}
    return {
        "by": "venus train",
        "step": step,
        "steps": train.get("steps"),
        "preset": model.get("preset"),
        "recipe_sha256": hashlib.sha256(recipe.read_bytes()).hexdigest() if settings else None,
        "recipe": settings or None,  # the resolved recipe, as its TOML tables
        "validation": figures,
        "init": _init_record(doc.get("init")),
        **({"voice": voice} if voice is not None else {}),
        **({"beside": beside} if beside is not None else {}),
    }


def _voice_record(voice: object) -> dict[str, Any] | None:
    """The voice a run spoke with (``venus train --voice``): its training step and its
    codebook's hash (``units_sha``), which ``reflow --engines-voice`` and ``venus validate``
    know a voice by; None where the run had none. A malformed one raises ValueError."""
    if voice is None:
        return None
    if not isinstance(voice, dict):
        raise ValueError(f"voice is {voice!r}, not a table")
    return {"step": int(voice["step"]), "units": str(voice["units"])}


def _init_record(init: object) -> dict[str, Any] | None:
    """What a run started from (`venus train --init`): its step and recipe, not its path
    (another machine's)."""
    if not isinstance(init, dict):
        return None
    return {"step": init.get("step"), "recipe": init.get("recipe")}
