"""``venus convert``: assemble a Venus checkpoint from upstream Hugging Face checkpoints.

Streams tensor by tensor into shards (memory stays near one shard), keeps upstream
dtypes (bf16 stays bf16), and initialises what has no upstream (projectors, resampler,
new token rows, the speech side unless ``--speech`` gives one) from seeded generators.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch

from venus.errors import ExportError
from venus.export.checkpoint import (
    MAX_SHARD_BYTES,
    CheckpointWriter,
    expected_tensors,
    iter_checkpoint,
)
from venus.export.convert.qwen3 import backbone_config_from_qwen3, qwen3_tensors
from venus.export.convert.siglip import siglip_tensors, vision_config_from_siglip
from venus.export.convert.upstream import HFCheckpoint
from venus.export.convert.whisper import audio_config_from_whisper, whisper_tensors
from venus.export.model.config import PRESETS, ModelConfig, load_config
from venus.export.model.init import INIT_STD, component_generator

log = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")
SPEECH_SIDE = ("speech_decoder", "flow_decoder", "vocoder")

Progress = Callable[[str, int, int], None]  # (component, tensors done, tensors in it)


@dataclass(frozen=True)
class Sources:
    qwen3: Path
    whisper: Path
    siglip2: Path | None = None
    speech: Path | None = None  # a Venus checkpoint whose speech side is reused
    speech_size: str = "venus-9b"  # preset giving the speech side when --speech is absent
    image_size: int = 448


def plan_config(src: Sources) -> ModelConfig:
    """The model config the upstream checkpoints describe."""
    backbone = backbone_config_from_qwen3(HFCheckpoint(src.qwen3).config, str(src.qwen3))
    audio = audio_config_from_whisper(HFCheckpoint(src.whisper).config)
    vision = (
        # The resampler works at the backbone's width, with the backbone's head count.
        replace(
            vision_config_from_siglip(HFCheckpoint(src.siglip2).config, image_size=src.image_size),
            resampler_heads=backbone.heads,
        )
        if src.siglip2 is not None
        else None
    )
    if src.speech is not None:
        side = load_config(src.speech / "config.json")
    elif src.speech_size in PRESETS:
        side = PRESETS[src.speech_size]()
    else:
        raise ExportError(f"--speech-size {src.speech_size!r}: choose one of {', '.join(PRESETS)}")
    frontend: Literal["omni", "audio"] = "omni" if vision is not None else "audio"
    return ModelConfig(
        name=f"converted-{frontend}",
        frontend=frontend,
        audio=audio,
        vision=vision,
        backbone=backbone,
        speech=side.speech,
        flow=side.flow,
        vocoder=side.vocoder,
    )


def _fresh(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if name.endswith("bias"):
        return torch.zeros(shape)
    if len(shape) == 1:
        return torch.ones(shape)
    return torch.randn(shape, generator=gen) * INIT_STD


class _Assembly:
    """One conversion: where each component's tensors come from, and writing them."""

    def __init__(self, src: Sources, cfg: ModelConfig, seed: int) -> None:
        self.src, self.cfg, self.seed = src, cfg, seed
        self.expected = expected_tensors(cfg)
        self.speech = dict(iter_checkpoint(src.speech)) if src.speech is not None else {}

    def upstream(self, component: str) -> Iterator[tuple[str, torch.Tensor]]:
        src, cfg = self.src, self.cfg
        if component == "backbone":
            with HFCheckpoint(src.qwen3) as ck:
                yield from qwen3_tensors(
                    ck, cfg.backbone, component_generator(self.seed, component)
                )
        elif component == "audio_encoder":
            with HFCheckpoint(src.whisper) as ck:
                yield from whisper_tensors(ck)
        elif component == "vision_encoder" and src.siglip2 is not None and cfg.vision is not None:
            with HFCheckpoint(src.siglip2) as ck:
                yield from siglip_tensors(ck, cfg.vision)
        elif component in SPEECH_SIDE:
            prefix = f"{component}."
            for key, tensor in self.speech.items():
                if not key.startswith(prefix):
                    continue
                name = key.removeprefix(prefix)
                if name.startswith("cond_proj.") and tuple(tensor.shape) != self.expected[key]:
                    # Sized for the donor's backbone: re-initialised for this one.
                    log.info("%s: backbone width differs from --speech; re-initialising", key)
                    continue
                yield name, tensor

    def write(
        self,
        writer: CheckpointWriter,
        component: str,
        fallback: torch.dtype,
        progress: Progress | None,
    ) -> torch.dtype | None:
        """Write one component: upstream tensors, then fresh ones; -> its upstream dtype."""
        prefix = component + "."
        shapes = {
            n.removeprefix(prefix): s for n, s in self.expected.items() if n.startswith(prefix)
        }
        done: set[str] = set()
        dtype: torch.dtype | None = None
        for name, tensor in self.upstream(component):
            if tuple(tensor.shape) != shapes.get(name, tuple(tensor.shape)):
                raise ExportError(
                    f"upstream tensor for {prefix}{name} has shape {tuple(tensor.shape)}, "
                    f"expected {shapes[name]}"
                )
            if name not in shapes:
                raise ExportError(f"upstream tensor for {prefix}{name} has no place in the model")
            dtype = dtype or tensor.dtype
            writer.add(component, name, tensor.to(dtype))
            done.add(name)
            if progress:
                progress(component, len(done), len(shapes))
        fresh = sorted(set(shapes) - done)
        if fresh:
            log.info("%s: initialising %d tensors with no upstream", component, len(fresh))
        gen = component_generator(self.seed, f"{component}/fresh")
        for name in fresh:
            writer.add(component, name, _fresh(name, shapes[name], gen).to(dtype or fallback))
            done.add(name)
            if progress:
                progress(component, len(done), len(shapes))
        return dtype


def convert(
    src: Sources,
    out: Path,
    seed: int = 0,
    progress: Progress | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> ModelConfig:
    """Write the checkpoint ``src`` describes to ``out``; -> its model config."""
    started = time.monotonic()
    cfg = plan_config(src)
    job = _Assembly(src, cfg, seed)
    writer = CheckpointWriter(out, cfg, max_shard_bytes)
    # The backbone goes first: components with no upstream take its dtype (bf16 stays bf16).
    fallback = job.write(writer, "backbone", torch.float32, progress) or torch.float32
    for component in ("audio_encoder", "vision_encoder", *SPEECH_SIDE):
        if any(n.startswith(component + ".") for n in job.expected):
            job.write(writer, component, fallback, progress)
    writer.finish()
    for file in TOKENIZER_FILES:
        if (src.qwen3 / file).exists():
            shutil.copy2(src.qwen3 / file, out / file)
    if not (src.qwen3 / "tokenizer.json").exists():
        log.warning(
            "%s has no tokenizer.json; copy the Qwen3 tokenizer.json into %s before "
            "`venus export` (it refuses a checkpoint without one)",
            src.qwen3,
            out,
        )
    log.info(
        "converted %s into %s: %.2f GB in %.1f s",
        cfg.name,
        out,
        writer.total_bytes / 1e9,
        time.monotonic() - started,
    )
    return cfg
