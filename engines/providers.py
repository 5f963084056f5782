"""Execution providers: which ones to use, and their options.

Providers are tried in the order ``EngineOptions.providers`` gives (TensorRT -> CUDA -> CPU
by default), keeping those this onnxruntime build offers; each one skipped is logged with
the reason. TensorRT gets its engine and timing caches under ``cache_dir/tensorrt`` (the
first start builds engines, which takes minutes at real size; later starts load them)
and fp16 when the engine's precision is fp16; CUDA and TensorRT get ``device_id``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import onnxruntime as ort

from venus.engines.options import EngineOptions, Provider
from venus.errors import EngineError

log = logging.getLogger(__name__)

ORT_PROVIDERS: dict[Provider, str] = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


def choose_providers(
    requested: Sequence[Provider], available: Sequence[str] | None = None
) -> tuple[Provider, ...]:
    """The requested providers this onnxruntime offers, in the requested order; logs the rest."""
    offered = list(ort.get_available_providers() if available is None else available)
    chosen: list[Provider] = []
    for name in dict.fromkeys(requested):
        if ORT_PROVIDERS[name] in offered:
            chosen.append(name)
        else:
            log.info(
                "execution provider %s skipped: this onnxruntime build does not offer %s "
                "(it offers %s)",
                name,
                ORT_PROVIDERS[name],
                ", ".join(offered),
            )
    if not chosen:
        raise EngineError(
            f"none of the execution providers {', '.join(requested)} is available in this "
            f"onnxruntime (it offers {', '.join(offered)}); add cpu to engines.providers or "
            "install onnxruntime-gpu"
        )
    log.info("execution providers: %s", " -> ".join(chosen))
    return tuple(chosen)


def provider_options(provider: Provider, options: EngineOptions, fp16: bool) -> dict[str, str]:
    """ONNX Runtime provider options for ``provider`` (strings, as the C API takes them)."""
    if provider == "cuda":
        return {"device_id": str(options.device_id)}
    if provider == "cpu":
        return {}
    out = {"device_id": str(options.device_id), "trt_fp16_enable": str(fp16)}
    if options.cache_dir is not None:
        trt_dir = str(options.cache_dir / "tensorrt")
        out |= {
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": trt_dir,
            "trt_timing_cache_enable": "True",
            "trt_timing_cache_path": trt_dir,
        }
    return out
