"""A copy of an ONNX engine directory with one component's graph made again: what
``revocode.py`` (the Griffin-Lim vocoder at another round count) and ``venus.train.reflow``
(the flow decoder from its voice, at another Euler step count) share.

The copy is written as ``venus export`` writes engines: every other file copied as it is,
the new graph, then the manifest last, so a copy that fails half-way is an unfinished
directory, never the old engines under a new name. The manifest's ``model_config`` says
the new config and ``tools`` records the change under the tool's name.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from venus.engines.manifest import MANIFEST, Manifest, load_manifest, verify, write_manifest
from venus.errors import ExportError, VenusError
from venus.export.model.config import ModelConfig, config_from_dict, config_to_dict
from venus.export.onnx.build import prepare_out
from venus.export.onnx.manifest import component_entry
from venus.export.onnx.specs import KVLayout

__all__ = ["engines_config", "run_tool", "swap_component"]


def engines_config(engines: Path, component: str) -> tuple[Manifest, ModelConfig]:
    """The manifest and model config of ONNX ``engines`` that list ``component``."""
    manifest = load_manifest(engines)
    if not manifest.model_config:
        raise ExportError(
            f"{engines}/manifest.json has no model_config (engines exported before it was "
            "recorded): export them again from their checkpoint"
        )
    if manifest.backend != "onnx":
        raise ExportError(
            f"{engines}: {manifest.backend} engines hold built plans; re-make the onnx "
            "engines, then build with `venus export --backend tensorrt`"
        )
    if component not in manifest.components:
        raise ExportError(f"{engines}/manifest.json lists no {component} component")
    if manifest.components[component].precision != "fp32":
        raise ExportError(
            f"{engines}: the {component} is {manifest.components[component].precision}; only "
            "an fp32 graph is made again here (export the engines at fp32)"
        )
    cfg = config_from_dict(manifest.model_config, f"{engines}/manifest.json model_config")
    return manifest, cfg


def swap_component(
    engines: Path,
    manifest: Manifest,
    out: Path,
    component: str,
    write: Callable[[Path], list[str]],
    new_cfg: ModelConfig,
    tool: str,
    change: str,
    kv: KVLayout | None = None,
) -> Manifest:
    """Copy ``engines`` to ``out`` (new or empty) with ``component`` replaced by what
    ``write(out)`` exports (-> its files, graph first); -> the new manifest."""
    prepare_out(out)
    old_files = {f.path for f in manifest.components[component].files}
    shutil.copytree(
        engines, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MANIFEST, *old_files)
    )
    files = write(out)
    entry = component_entry(out, files, "fp32", kv)
    earlier = manifest.tools.get(tool)
    result = dataclasses.replace(
        manifest,
        components={**manifest.components, component: entry},
        model_config=config_to_dict(new_cfg),
        tools={**manifest.tools, tool: f"{earlier}; {change}" if earlier else change},
    )
    write_manifest(out, result)
    verify(out, result)
    return result


def run_tool(tool: str, out: Path, make: Callable[[], Manifest]) -> int:
    """A swapping tool's command line: ``make()`` with its progress logged; -> exit code
    (1, the error on stderr, for what it refused)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        result = make()
    except VenusError as e:
        sys.stderr.write(f"{tool}: {e}\n")
        return 1
    sys.stdout.write(f"{tool}: wrote {out} ({result.tools[tool]})\n")
    return 0
