"""The vocoder runner: 80-bin mel (50 Hz) -> 24 kHz PCM, streamed with each causal conv's cache.

Every causal conv ``k`` keeps its last ``context_k`` input samples (``past_conv.{k}``
[batch, channels_k, context_k], zeros at the start), so chunks of any length give the
one-shot waveform sample for sample. A Griffin-Lim vocoder (``export/model/griffin_lim.py``,
no weights) carries its two pieces of state in the same slots; its chunks are each final,
but chunks of other sizes give a slightly different wave. A vocoder with a sine source
(neural source-filter, ``export/model/vocoder_source.py``) also carries its phase,
``past_phase`` [batch, 1] cycles, zeros at the start, returned as ``present_phase``; a
graph without that input has no source and no phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.session import Session
from venus.errors import EngineError

PAST = "past_conv.{}"
PRESENT = "present_conv.{}"
PAST_PHASE = "past_phase"
PRESENT_PHASE = "present_phase"


@dataclass
class VocoderState:
    """One stream's vocoder state: the conv caches by conv index, the source's phase
    ([batch, 1] cycles; None for a vocoder without a source)."""

    caches: list[NDArray[Any]]
    phase: NDArray[Any] | None = None

    def reset(self) -> None:
        self.caches = [np.zeros_like(c) for c in self.caches]
        if self.phase is not None:
            self.phase = np.zeros_like(self.phase)


class VocoderRunner:
    def __init__(self, session: Session, hop: int) -> None:
        self.session = session
        self.hop = hop  # PCM samples per mel frame
        self.mel_bins = session.dim("mel", 1)
        self.convs = sum(1 for name in session.inputs if name.startswith("past_conv."))
        self.cache_shapes = [
            (session.dim(PAST.format(k), 1), session.dim(PAST.format(k), 2))
            for k in range(self.convs)
        ]
        self.has_phase = PAST_PHASE in session.inputs

    def new_state(self, batch: int = 1) -> VocoderState:
        dtype = self.session.dtype("mel")
        phase = np.zeros((batch, 1), self.session.dtype(PAST_PHASE)) if self.has_phase else None
        return VocoderState(
            caches=[np.zeros((batch, c, n), dtype=dtype) for c, n in self.cache_shapes],
            phase=phase,
        )

    def step(self, mel: NDArray[Any], state: VocoderState) -> NDArray[Any]:
        """Feed mel [batch, mel_bins, frames] (any frames) -> PCM [batch, frames * hop]."""
        batch = state.caches[0].shape[0] if state.caches else mel.shape[0]
        if mel.ndim != 3 or mel.shape[:2] != (batch, self.mel_bins):
            raise EngineError(
                f"vocoder got mel of shape {mel.shape}; expected [{batch}, {self.mel_bins}, frames]"
            )
        mel = mel.astype(self.session.dtype("mel"), copy=False)  # fp16 flow, fp32 vocoder
        feeds = {"mel": mel} | {PAST.format(k): c for k, c in enumerate(state.caches)}
        if state.phase is not None:
            feeds[PAST_PHASE] = state.phase
        out = self.session.run(feeds)
        state.caches = [out[PRESENT.format(k)] for k in range(self.convs)]
        if state.phase is not None:
            state.phase = out[PRESENT_PHASE]
        return out["pcm"]
