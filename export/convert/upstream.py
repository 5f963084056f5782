"""Read a Hugging Face-layout checkpoint directory lazily, one tensor at a time.

``config.json`` plus either ``model.safetensors`` or sharded files listed in
``model.safetensors.index.json``. Tensors are memory-mapped by safetensors and read on
demand, so converting an 8B model never holds more than one shard's worth of pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from venus.errors import ExportError


class HFCheckpoint:
    """An upstream checkpoint: ``config`` (dict), ``keys()``, ``get(name)``, ``has(name)``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        config_path = root / "config.json"
        try:
            self.config: dict[str, Any] = json.loads(config_path.read_text())
        except FileNotFoundError:
            raise ExportError(
                f"{config_path}: no such file; pass a Hugging Face model directory"
            ) from None
        except json.JSONDecodeError as e:
            raise ExportError(f"{config_path}: not valid JSON: {e}") from e
        self._where = self._index()
        self._stack = ExitStack()
        self._open: dict[Path, Any] = {}

    def _index(self) -> dict[str, Path]:
        index = self.root / "model.safetensors.index.json"
        if index.exists():
            weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
            where = {name: self.root / file for name, file in weight_map.items()}
            for file in sorted(set(where.values())):
                if not file.exists():
                    raise ExportError(f"{file}: shard listed in {index.name} is missing")
            return where
        single = self.root / "model.safetensors"
        if not single.exists():
            raise ExportError(
                f"{self.root}: no model.safetensors or model.safetensors.index.json "
                "(only safetensors checkpoints are read)"
            )
        with safe_open(str(single), framework="pt") as f:
            return {name: single for name in f.keys()}  # noqa: SIM118 - safe_open has no __iter__

    def names(self) -> list[str]:
        return list(self._where)

    def has(self, name: str) -> bool:
        return name in self._where

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def get(self, name: str) -> torch.Tensor:
        if name not in self._where:
            raise ExportError(f"{self.root}: tensor {name} is missing from the checkpoint")
        path = self._where[name]
        handle = self._open.get(path)
        if handle is None:
            # One shard open at a time: close the previous one to release its mapping.
            self.close()
            handle = self._stack.enter_context(safe_open(str(path), framework="pt"))
            self._open = {path: handle}
        tensor: torch.Tensor = handle.get_tensor(name)
        return tensor

    def by_shard(self, names: list[str]) -> Iterator[str]:
        """``names`` reordered so each shard is read once, in file order."""
        return iter(sorted(names, key=lambda n: (str(self._where.get(n, "")), n)))

    def close(self) -> None:
        self._stack.close()
        self._stack = ExitStack()
        self._open = {}

    def __enter__(self) -> HFCheckpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
