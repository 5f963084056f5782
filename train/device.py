"""``venus train --device``: where the model trains."""

from __future__ import annotations

from collections.abc import Callable

import torch

from venus.train.config import TrainConfigError

__all__ = ["resolve_device"]


def resolve_device(name: str, write: Callable[[str], None] = lambda _s: None) -> torch.device:
    """``cpu``, ``cuda`` / ``cuda:N`` (which must be there), or ``auto`` (the first GPU
    when torch sees one, else the CPU); ``write`` is told which."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TrainConfigError(
            f"--device {name!r}: not a device; use auto, cpu, cuda or cuda:N"
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise TrainConfigError(f"--device {name!r}: venus train runs on cpu or cuda")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TrainConfigError(
                f"--device {name}: this torch ({torch.__version__}) sees no CUDA GPU; "
                "use --device cpu, or a CUDA build of torch on a machine with an NVIDIA GPU"
            )
        if (device.index or 0) >= torch.cuda.device_count():
            raise TrainConfigError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s)"
            )
        write(f"train: on {device} ({torch.cuda.get_device_name(device)})")
    else:
        write("train: on the CPU")
    return device
