"""Offline subcommands: ``venus init``, ``venus convert``, ``venus model info``,
``venus export``.

Registration imports nothing heavy; ``init``, ``convert`` and ``export`` import torch when
they run (install the ``export`` extra), ``model info`` needs no torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus.errors import ExportError

if TYPE_CHECKING:
    from venus.engines.manifest import Manifest, Sampling

log = logging.getLogger(__name__)

TORCH_MISSING = "this command needs torch: pip install -c constraints.txt 'realtime-venus[export]'"
TENSORRT_MISSING = "--backend tensorrt needs TensorRT: pip install '.[gpu]' on an NVIDIA machine"


def register(commands: argparse._SubParsersAction[Any]) -> None:
    init = commands.add_parser(
        "init",
        help="write a randomly initialised checkpoint",
        description="Write a checkpoint with seeded random weights (the same seed gives "
        "byte-identical weights).",
    )
    init.add_argument(
        "--config",
        dest="model_config",
        required=True,
        metavar="PRESET_OR_JSON",
        help="a preset (tiny, tiny-audio, tiny-wide, tiny-wide-audio, small, small-audio, "
        "venus-9b, venus-9b-audio) "
        "or a config.json",
    )
    init.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    init.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="new checkpoint directory"
    )
    init.add_argument(
        "--dtype",
        choices=("float32", "float16", "bfloat16"),
        default="float32",
        help="stored dtype (default float32)",
    )
    init.set_defaults(run=_init)

    conv = commands.add_parser(
        "convert",
        help="assemble a checkpoint from upstream Qwen3 / Whisper / SigLIP2 weights",
        description="Assemble a Venus checkpoint from Hugging Face-layout directories "
        "(config.json + safetensors). Reads files only; never downloads. Without --siglip2 "
        "the result is an audio-frontend model.",
    )
    conv.add_argument("--qwen3", type=Path, required=True, metavar="DIR", help="Qwen3 causal LM")
    conv.add_argument("--whisper", type=Path, required=True, metavar="DIR", help="Whisper model")
    conv.add_argument(
        "--siglip2", type=Path, metavar="DIR", help="SigLIP2 (or SigLIP) vision model"
    )
    conv.add_argument(
        "--speech",
        type=Path,
        metavar="CKPT",
        help="Venus checkpoint whose speech decoder, flow decoder and vocoder are reused",
    )
    conv.add_argument(
        "--speech-size",
        default="venus-9b",
        metavar="PRESET",
        help="preset sizing a freshly initialised speech side (default venus-9b)",
    )
    conv.add_argument(
        "--image-size", type=int, default=448, help="vision input size in px (default 448)"
    )
    conv.add_argument(
        "--seed", type=int, default=0, help="seed for what has no upstream (default 0)"
    )
    conv.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="new checkpoint directory"
    )
    conv.set_defaults(run=_convert)

    model = commands.add_parser("model", help="inspect model sizes and per-chunk cost")
    actions = model.add_subparsers(dest="action", metavar="ACTION", required=True)
    info = actions.add_parser(
        "info",
        help="parameters and bytes per component; FLOPs and bytes moved per chunk",
        description="Parameters and weight bytes per component at fp32 / fp16 / int8 / int4, "
        "and per-chunk FLOPs and bytes moved for the default chunk schedule (needs torch; "
        "nothing is allocated: the model is built on the meta device).",
    )
    info.add_argument(
        "model",
        metavar="CONFIG_OR_CHECKPOINT",
        help="preset name, config.json, or checkpoint directory",
    )
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(run=_model_info)
    _register_export(commands)


def _register_export(commands: argparse._SubParsersAction[Any]) -> None:
    exp = commands.add_parser(
        "export",
        help="export a checkpoint to engines: one ONNX graph per component + manifest.json",
        description="Export a checkpoint to an engine directory: one ONNX graph per "
        "component (docs/engines.md) and manifest.json with their files, hashes, inputs and "
        "outputs. Takes minutes at full size; logs a line per component.",
    )
    exp.add_argument("checkpoint", type=Path, metavar="CKPT", help="checkpoint directory")
    exp.add_argument(
        "--out", type=Path, required=True, metavar="ENGINES", help="new engine directory"
    )
    exp.add_argument(
        "--precision",
        choices=("fp32", "fp16", "int4"),
        default="fp32",
        help="fp32 (default); fp16: every graph in float16; int4: block-wise int4 weights "
        "for the backbone and speech decoder (ONNX Runtime MatMulNBits), the rest fp32",
    )
    exp.add_argument(
        "--backend",
        choices=("onnx", "tensorrt"),
        default="onnx",
        help="onnx (default), or tensorrt: also build TensorRT engines from the ONNX graphs",
    )
    exp.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help="recommend this sampling temperature for the engines' text and speech tokens "
        "(0 to 2; 0 is greedy): the daemon uses it where [model] temperature is not set "
        "(default: no recommendation, the daemon's 0.7)",
    )
    exp.add_argument(
        "--top-p",
        type=float,
        metavar="P",
        help="recommend this nucleus mass (over 0, at most 1) where [model] top_p is not set "
        "(default: no recommendation, the daemon's 0.9)",
    )
    exp.add_argument(
        "--flow-temperature",
        type=float,
        metavar="T",
        help="recommend this scale of the flow decoder's starting noise (0 to 2; 0: no "
        "noise, its mean path) where [model] flow_temperature is not set (default: no "
        "recommendation, the daemon's 1.0)",
    )
    exp.add_argument(
        "--verify",
        action="store_true",
        help="check every graph against the torch reference on random inputs and print a "
        "table; exit status 1 if an fp32 graph is off by more than 1e-4 (relative)",
    )
    exp.set_defaults(run=_export)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ExportError(TORCH_MISSING) from None
    return torch


def _init(args: argparse.Namespace) -> int:
    torch = _torch()
    from venus.export.checkpoint import save_model
    from venus.export.model.config import resolve_config
    from venus.export.model.init import init_model
    from venus.export.model.venus import VenusModel

    cfg = resolve_config(args.model_config)
    model = VenusModel(cfg)
    init_model(model, args.seed)
    save_model(model, args.out, getattr(torch, args.dtype))
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    log.info(
        "wrote %s: %s, %.2f M parameters, seed %d", args.out, cfg.name, params / 1e6, args.seed
    )
    return 0


def _convert(args: argparse.Namespace) -> int:
    _torch()
    from venus.export.convert.assemble import Sources, convert

    last = {"component": ""}

    def progress(component: str, done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\r{component}: {done}/{total} tensors", end="", file=sys.stderr)  # noqa: T201
            if done == total:
                print(file=sys.stderr)  # noqa: T201
        elif component != last["component"] or done == total:
            log.info("%s: %d/%d tensors", component, done, total)
            last["component"] = component

    src = Sources(
        qwen3=args.qwen3,
        whisper=args.whisper,
        siglip2=args.siglip2,
        speech=args.speech,
        speech_size=args.speech_size,
        image_size=args.image_size,
    )
    cfg = convert(src, args.out, seed=args.seed, progress=progress)
    log.info("wrote %s (%s frontend)", args.out, cfg.frontend)
    return 0


def _model_info(args: argparse.Namespace) -> int:
    _torch()
    from venus.export.info import model_info, render_info
    from venus.export.model.config import resolve_config

    info = model_info(resolve_config(args.model))
    if args.json:
        print(json.dumps(info, indent=2))  # noqa: T201
    else:
        sys.stdout.write(render_info(info))
    return 0


def _export(args: argparse.Namespace) -> int:
    _torch()
    if args.backend == "tensorrt":
        if args.precision == "int4":
            raise ExportError(
                "--backend tensorrt takes --precision fp32 or fp16 (int4 graphs use ONNX "
                "Runtime's MatMulNBits, which TensorRT cannot parse); use --backend onnx for int4"
            )
        if importlib.util.find_spec("tensorrt") is None:
            raise ExportError(TENSORRT_MISSING)
    from venus.export.checkpoint import load_model
    from venus.export.model.venus import VenusModel
    from venus.export.onnx.build import checkpoint_tokenizer, export_engines, prepare_out

    sampling = _sampling(args.temperature, args.top_p, args.flow_temperature)

    if not (args.checkpoint / "config.json").is_file():
        raise ExportError(
            f"{args.checkpoint}: not a checkpoint directory (no config.json); make one with "
            "`venus init` or `venus convert`"
        )
    checkpoint_tokenizer(args.checkpoint)  # these two before minutes of loading, not after
    prepare_out(args.out)
    log.info("loading %s", args.checkpoint)
    model = load_model(args.checkpoint)
    if not isinstance(model, VenusModel):
        raise ExportError(f"{args.checkpoint}: did not load as a Venus model")
    manifest = export_engines(model, args.checkpoint, args.out, args.precision, sampling)
    if args.backend == "tensorrt":
        _build_tensorrt(args.out, manifest, fp16=args.precision == "fp16")
        from venus.engines.manifest import load_manifest

        manifest = load_manifest(args.out)  # now listing the plans too
    if not args.verify:
        return 0
    from venus.export.onnx.verify import render_report, verify_engines

    log.info("verifying %s against the torch reference", args.out)
    checks, decode = verify_engines(args.out, manifest, model)
    sys.stdout.write(render_report(checks, decode))
    failed = [c.component for c in checks if c.result == "FAIL"]
    if failed:
        log.error("parity check failed for %s: re-export, or report a bug", ", ".join(failed))
        return 1
    return 0


def _sampling(
    temperature: float | None, top_p: float | None, flow_temperature: float | None = None
) -> Sampling | None:
    """``--temperature``, ``--top-p`` and ``--flow-temperature`` as the manifest's
    recommendation (None: none given); a value out of range is an error naming the
    option."""
    from pydantic import ValidationError

    from venus.engines.manifest import Sampling

    if temperature is None and top_p is None and flow_temperature is None:
        return None
    try:
        return Sampling(temperature=temperature, top_p=top_p, flow_temperature=flow_temperature)
    except ValidationError as e:
        (err, *_) = e.errors()
        option = "--" + str(err["loc"][-1]).replace("_", "-")
        raise ExportError(f"{option} {err['input']}: {err['msg']}") from None


def _build_tensorrt(out: Path, manifest: Manifest, fp16: bool) -> None:
    """TensorRT engines from the ONNX graphs (venus.export.tensorrt, imported lazily)."""
    try:
        import tensorrt  # noqa: F401 - only whether it imports
    except ImportError:
        raise ExportError(TENSORRT_MISSING) from None
    from venus.export.tensorrt import build_tensorrt

    build_tensorrt(out, manifest, fp16)
