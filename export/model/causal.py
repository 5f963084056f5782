"""Causal convolutions that stream sample-exact: the vocoder's and its source's building block.

A ``CausalConv1d`` pads on the left only, so output ``n`` sees inputs ``<= n`` (with a
stride ``s``: inputs before ``(n + 1) * s``). Streamed, it carries its last ``context``
input samples between chunks (``ConvCaches``), and chunks of any length (a multiple of
the stride) give exactly the one-shot output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn


@dataclass
class ConvCaches:
    """Left contexts of every causal conv by slot: read ``old``, written into ``new``."""

    old: list[Tensor]
    new: list[Tensor]


class CausalConv1d(nn.Conv1d):
    """Conv1d padded on the left only; ``stream`` carries the left context between chunks.

    ``slot`` is this conv's index in the owner's caches (set by the vocoder). With a
    ``stride`` s, inputs come in multiples of s and each output sees the kernel's inputs
    ending at its own s-sample block: ``context = kernel - s`` samples of history.
    """

    def __init__(
        self, cin: int, cout: int, kernel: int, dilation: int = 1, stride: int = 1
    ) -> None:
        super().__init__(cin, cout, kernel, dilation=dilation, stride=stride)
        self.context = (kernel - 1) * dilation + 1 - stride  # input history each output needs
        if self.context < 0:
            raise ValueError(f"causal conv: kernel {kernel} is shorter than its stride {stride}")
        self.slot = -1

    def forward(self, x: Tensor) -> Tensor:
        """x [B, cin, T] (zeros before the start) -> [B, cout, T // stride]."""
        y: Tensor = self._conv_forward(F.pad(x, (self.context, 0)), self.weight, self.bias)
        return y

    def stream(self, x: Tensor, cache: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, cin, T], cache [B, cin, context] (the previous input) -> (y, new cache)."""
        full = torch.cat((cache, x), dim=-1)
        y: Tensor = self._conv_forward(full, self.weight, self.bias)
        return y, full[..., full.shape[-1] - self.context :]

    def apply_cached(self, x: Tensor, caches: ConvCaches | None) -> Tensor:
        """One-shot when ``caches`` is None, else stream through this conv's slot."""
        if caches is None:
            return self.forward(x)
        y, caches.new[self.slot] = self.stream(x, caches.old[self.slot])
        return y


def causal(convs: nn.ModuleList) -> Iterable[CausalConv1d]:
    """The ModuleList's convs, typed (a ModuleList iterates as plain ``nn.Module``)."""
    return cast("Iterable[CausalConv1d]", convs)
