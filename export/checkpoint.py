"""Checkpoint directories: ``config.json`` plus component-prefixed safetensors shards.

Layout::

    config.json                      model config (format + version, validated)
    tokenizer.json                   Hugging Face tokenizers file (``venus init``: byte-level)
    model.safetensors.index.json     {"metadata": {...}, "weight_map": {tensor: file}}
    audio_encoder-00001.safetensors  shards, one component per shard, <= max_shard_bytes
    backbone-00001.safetensors ...

The index metadata records each component's dtype; every tensor of a component has it.
Reading checks every expected tensor, shape and dtype against the config and names the
tensor and the file of anything wrong.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from venus.engines.tokenizer import TOKENIZER_FILE
from venus.errors import ExportError
from venus.export.model.config import ModelConfig, load_config, save_config

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"
MAX_SHARD_BYTES = 2 * 1024**3
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class CheckpointWriter:
    """Write tensors component by component, flushing a shard when it reaches the limit.

    Memory stays bounded by one shard: tensors are held only until their shard is full.
    """

    def __init__(self, out: Path, cfg: ModelConfig, max_shard_bytes: int = MAX_SHARD_BYTES) -> None:
        out.mkdir(parents=True, exist_ok=True)
        if (out / INDEX).exists() or any(out.glob("*.safetensors")):
            raise ExportError(f"{out}: already holds a checkpoint; choose an empty directory")
        self.out, self.cfg, self.max_shard_bytes = out, cfg, max_shard_bytes
        self.weight_map: dict[str, str] = {}
        self.dtypes: dict[str, str] = {}
        self._component = ""
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        self._shard_no = 0
        self.total_bytes = 0

    def add(self, component: str, name: str, tensor: torch.Tensor) -> None:
        """Add ``component.name``; all tensors of one component must be added together."""
        if component != self._component:
            self._flush()
            if component in self.dtypes:
                raise ExportError(f"component {component} written in two separate runs")
            self._component, self._shard_no = component, 0
            self.dtypes[component] = DTYPE_NAMES[tensor.dtype]
        if DTYPE_NAMES.get(tensor.dtype) != self.dtypes[component]:
            raise ExportError(
                f"{component}.{name}: dtype {tensor.dtype} differs from the component's "
                f"{self.dtypes[component]}"
            )
        size = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + size > self.max_shard_bytes:
            self._flush()
        self._pending[f"{component}.{name}"] = tensor.detach().contiguous()
        self._pending_bytes += size

    def _flush(self) -> None:
        if not self._pending:
            return
        self._shard_no += 1
        file = f"{self._component}-{self._shard_no:05d}.safetensors"
        save_file(self._pending, str(self.out / file), metadata={"format": "pt"})
        # safetensors writes 0600; a checkpoint is read by other users (the service user).
        (self.out / file).chmod(0o666 & ~_umask())
        for key in self._pending:
            self.weight_map[key] = file
        self.total_bytes += self._pending_bytes
        log.info(
            "wrote %s (%d tensors, %.1f MB)", file, len(self._pending), self._pending_bytes / 1e6
        )
        self._pending, self._pending_bytes = {}, 0

    def finish(self) -> None:
        self._flush()
        index = {
            "metadata": {"total_size": self.total_bytes, "component_dtypes": self.dtypes},
            "weight_map": dict(sorted(self.weight_map.items())),
        }
        (self.out / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        save_config(self.cfg, self.out / "config.json")


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of ``cfg`` holds, with its shape (built on the meta device)."""
    from venus.export.model.venus import VenusModel

    with torch.device("meta"):
        model = VenusModel(cfg)
    out: dict[str, tuple[int, ...]] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:  # a tied weight is stored once, under its first name
            continue
        seen.add(id(tensor))
        out[name] = tuple(tensor.shape)
    return out


def read_index(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """-> (weight_map, component dtypes), with clear errors for a missing or bad index."""
    path = root / INDEX
    try:
        index = json.loads(path.read_text())
        return dict(index["weight_map"]), dict(index["metadata"]["component_dtypes"])
    except FileNotFoundError:
        raise ExportError(f"{path}: no such file; is {root} a Venus checkpoint?") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ExportError(f"{path}: unreadable checkpoint index ({e})") from e


def iter_checkpoint(root: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Validate a checkpoint and yield its tensors, shard by shard.

    Raises ExportError naming the tensor and file for a missing shard, a missing or
    unexpected tensor, a wrong shape or a wrong dtype.
    """
    cfg = load_config(root / "config.json")
    weight_map, dtypes = read_index(root)
    expected = expected_tensors(cfg)
    for name in expected:
        if name not in weight_map:
            raise ExportError(f"{root / INDEX}: tensor {name} is missing from the checkpoint")
    for name in weight_map:
        if name not in expected:
            raise ExportError(
                f"{root / weight_map[name]}: tensor {name} does not belong to a "
                f"{cfg.name} ({cfg.frontend}) model"
            )
    for file in sorted(set(weight_map.values())):
        path = root / file
        names = [n for n, f in weight_map.items() if f == file]
        if not path.exists():
            raise ExportError(
                f"{path}: shard is missing (it holds {names[0]} and {len(names) - 1} more)"
            )
        try:
            with safe_open(str(path), framework="pt") as f:
                stored = set(f.keys())
                for name in names:
                    if name not in stored:
                        raise ExportError(
                            f"{path}: tensor {name} listed in the index is not in the file"
                        )
                    tensor: torch.Tensor = f.get_tensor(name)
                    _check(name, tensor, expected[name], dtypes, path)
                    yield name, tensor
        except SafetensorError as e:
            raise ExportError(f"{path}: unreadable shard, truncated or corrupt ({e})") from e


def _check(
    name: str, tensor: torch.Tensor, shape: tuple[int, ...], dtypes: dict[str, str], path: Path
) -> None:
    if tuple(tensor.shape) != shape:
        raise ExportError(
            f"{path}: tensor {name} has shape {tuple(tensor.shape)}, expected {shape}"
        )
    component = name.split(".", 1)[0]
    want = dtypes.get(component)
    if DTYPE_NAMES.get(tensor.dtype) != want:
        raise ExportError(f"{path}: tensor {name} has dtype {tensor.dtype}, expected {want}")


def load_model(root: Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A ``VenusModel`` with the checkpoint's weights, cast to ``dtype``, in eval mode."""
    from venus.export.model.venus import VenusModel

    cfg = load_config(root / "config.json")
    state = {name: tensor.to(dtype) for name, tensor in iter_checkpoint(root)}
    model = VenusModel(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied weights appear under two names; only the second one may be "missing".
    tied = {n for n in missing if n not in expected_tensors(cfg)}
    if set(missing) - tied or unexpected:
        raise ExportError(f"{root}: checkpoint does not fit the model: {missing} {unexpected}")
    return model.to(dtype).eval()


def save_model(model: torch.nn.Module, out: Path, dtype: torch.dtype = torch.float32) -> None:
    """Write a whole in-memory ``VenusModel`` as a checkpoint (used by ``venus init``), with
    a byte-level ``tokenizer.json`` (random weights have no upstream tokenizer)."""
    writer = CheckpointWriter(out, model.cfg)  # type: ignore[arg-type]
    expected = expected_tensors(model.cfg)  # type: ignore[arg-type]
    state = model.state_dict()
    for name in expected:
        component, rest = name.split(".", 1)
        writer.add(component, rest, state[name].to(device="cpu", dtype=dtype))
    writer.finish()
    write_byte_tokenizer(out / TOKENIZER_FILE)


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte value, indexed by the byte (what the
    ByteLevel pre-tokenizer maps bytes to): printable Latin-1 stays, the rest go to 256+."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    moved = (b for b in range(256) if b not in keep)
    symbol = {b: chr(b) for b in keep} | {b: chr(256 + n) for n, b in enumerate(moved)}
    return [symbol[b] for b in range(256)]


def write_byte_tokenizer(path: Path) -> None:
    """A byte-level BPE ``tokenizer.json`` without merges: token id = byte value (0..255).

    Every UTF-8 text encodes (one token a byte) and decodes back; ids 256 and up are not
    in it and decode to nothing. No randomness and no training: the file depends on
    nothing, so ``venus init`` stays byte-identical for a seed.
    """
    vocab = {s: b for b, s in enumerate(byte_symbols())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    path.write_text(tokenizer.to_str(pretty=True) + "\n", encoding="utf-8")
