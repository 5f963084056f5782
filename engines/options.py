"""How the engines runtime opens sessions: a frozen options object the daemon fills in.

``venus.engines`` never imports ``venus.daemon``; the daemon maps its ``[engines]``
config section onto ``EngineOptions`` (the fields and their meaning are the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from venus.errors import EngineError

Provider = Literal["tensorrt", "cuda", "cpu"]
GraphOptimization = Literal["disable", "basic", "extended", "all"]


@dataclass(frozen=True)
class EngineOptions:
    """Execution providers and session settings shared by every graph of an engine.

    ``providers`` are tried in the order given (those this onnxruntime build offers);
    ``cache_dir`` holds the file-hash cache, optimised models and the TensorRT engine and
    timing caches; ``None`` turns every cache off (each start re-hashes and re-optimises).
    """

    providers: tuple[Provider, ...] = ("tensorrt", "cuda", "cpu")
    device_id: int = 0  # CUDA device index
    intra_op_threads: int = 0  # CPU threads per session; 0 lets ONNX Runtime pick
    graph_optimization: GraphOptimization = "all"
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        if not self.providers:
            raise EngineError(
                "engine options: no providers; list at least one of tensorrt, cuda, cpu"
            )
        if self.device_id < 0 or self.intra_op_threads < 0:
            raise EngineError("engine options: device_id and intra_op_threads must be >= 0")
