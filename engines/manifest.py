"""``manifest.json``: what an engine directory holds and how to feed each graph.

Written by ``venus export`` (offline), read by the daemon's engines runtime. Torch-free.
Every file (the graphs and the tokenizer) is listed with its size and sha256; ``verify``
checks them and names any file that is missing, truncated or corrupt.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from venus.errors import EngineError

FORMAT: Final = "venus-engines"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HASH_BLOCK = 1 << 24  # 16 MiB reads while hashing multi-GB files
_CFG = ConfigDict(extra="forbid", frozen=True)

Precision = Literal["fp32", "fp16", "int4"]
Backend = Literal["onnx", "tensorrt"]
Dim = int | str  # a fixed size or a symbolic name ("batch", "past_sequence", ...)


@dataclass(config=_CFG)
class FileEntry:
    path: str  # relative to the engine directory
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


@dataclass(config=_CFG)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name: float32, float16, int64, ...
    shape: tuple[Dim, ...]


@dataclass(config=_CFG)
class ComponentEntry:
    files: tuple[FileEntry, ...]  # the graph first, then its external data, if any
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    precision: Precision
    # Backbone / speech decoder / flow decoder: the KV-cache layout of past_key_values.*.
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None

    @property
    def graph(self) -> str:
        return self.files[0].path


@dataclass(config=_CFG)
class Schedule:
    chunk_s: float
    sample_rate_in: int  # microphone audio fed to the mel front end
    hop_length: int
    n_mels: int
    mel_frames: int  # per chunk
    audio_tokens: int  # per chunk
    vision_tokens: int  # per frame; 0 for an audio frontend
    image_size: int  # 0 for an audio frontend
    speech_tokens: int  # S3 tokens per chunk
    speech_codebook: int
    speech_end_token: int
    speech_start_token: int
    mel_frames_out: int  # flow mel frames per speech token
    lookahead_tokens: int
    prompt_frames: int
    sample_rate_out: int
    hop_out: int  # PCM samples per output mel frame


@dataclass(config=_CFG)
class Sampling:
    """How the exporter recommends sampling these engines' text and speech tokens
    (``venus export --temperature / --top-p``) and the flow decoder's noise (``venus
    export --flow-temperature``); the daemon takes each where its own ``[model]`` key is
    not set. None: no recommendation."""

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)  # 0: greedy
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # The flow decoder's starting noise scale (``engines/flow.py``; 0: its mean path)
    flow_temperature: float | None = Field(default=None, ge=0.0, le=2.0)


@dataclass(config=_CFG)
class Manifest:
    format: Literal["venus-engines"]
    version: int
    model: str
    frontend: Literal["omni", "audio"]
    precision: Precision
    backend: Backend
    opset: int
    special_tokens: dict[str, int]
    control_tokens: tuple[str, ...]
    schedule: Schedule
    components: dict[str, ComponentEntry]
    source: dict[str, str]  # checkpoint path and sha256
    tools: dict[str, str]  # versions that made it
    model_config: dict[str, Any] = field(default_factory=dict)  # the checkpoint's config.json
    # The checkpoint's tokenizer.json; None in manifests written before it was exported.
    tokenizer: FileEntry | None = None
    # How the checkpoint was trained (``venus train``'s train/metrics.json and recipe):
    # None for weights that were never trained (`venus init`) or not by venus train.
    trained: dict[str, Any] | None = None
    # The exporter's sampling recommendation; None: none (the daemon's defaults apply).
    sampling: Sampling | None = None

    def files(self) -> list[tuple[str, FileEntry]]:
        """Every listed file, with what it belongs to (a component's name, or "tokenizer")."""
        out = [(name, entry) for name, c in self.components.items() for entry in c.files]
        if self.tokenizer is not None:
            out.append(("tokenizer", self.tokenizer))
        return out


_ADAPTER: TypeAdapter[Manifest] = TypeAdapter(Manifest)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_entry(root: Path, rel: str) -> FileEntry:
    path = root / rel
    return FileEntry(path=rel, bytes=path.stat().st_size, sha256=sha256_file(path))


def manifest_dict(manifest: Manifest) -> dict[str, Any]:
    data: dict[str, Any] = _ADAPTER.dump_python(manifest, mode="json")
    return data


def write_manifest(root: Path, manifest: Manifest) -> None:
    (root / MANIFEST).write_text(json.dumps(manifest_dict(manifest), indent=2) + "\n")


def load_manifest(root: Path) -> Manifest:
    """Read and validate ``root/manifest.json`` (files are not hashed: see ``verify``)."""
    path = root / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise EngineError(
            f"{path}: no such file; {root} is not an engine directory (make one with "
            "`venus export CHECKPOINT --out DIR`)"
        ) from None
    except json.JSONDecodeError as e:
        raise EngineError(f"{path}: not valid JSON ({e}); re-run `venus export`") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EngineError(f"{path}: not a Venus engine manifest")
    if data.get("version") != FORMAT_VERSION:
        raise EngineError(
            f"{path}: manifest version {data.get('version')!r} is not supported (this release "
            f"reads version {FORMAT_VERSION}); re-export the engines"
        )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise EngineError(f"{path}: invalid manifest: {problems}") from None


def verify(
    root: Path, manifest: Manifest, sha256: Callable[[Path], str] | None = sha256_file
) -> None:
    """Every listed file exists with its size and sha256 (``sha256`` None: sizes only).

    ``sha256`` computes a file's digest; the runtime passes a cached one (``hashcache``).
    """
    for name, entry in manifest.files():
        what = "the tokenizer" if name == "tokenizer" else f"{name} engine"
        path = root / entry.path
        if not path.is_file():
            raise EngineError(f"{path}: missing ({what}); re-run `venus export`")
        size = path.stat().st_size
        if size != entry.bytes:
            raise EngineError(
                f"{path}: {size} bytes, the manifest says {entry.bytes} ({what} is "
                "truncated or was replaced); re-run `venus export`"
            )
        if sha256 is not None and sha256(path) != entry.sha256:
            raise EngineError(
                f"{path}: sha256 does not match the manifest ({what} is corrupt); "
                "re-run `venus export`"
            )
