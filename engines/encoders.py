"""Audio and vision encoder runners: one mic chunk / camera frame in, backbone-width tokens out.

The audio encoder is streamed: each chunk's window is the conv features of up to
``left_context_chunks`` previous chunks (``AudioState.context``, empty at stream start)
plus its own, as ``AudioEncoder.step`` in the torch reference. The graph returns the
context for the next chunk; the runner only carries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.session import Session
from venus.errors import EngineError


@dataclass
class AudioState:
    """One stream's audio-encoder state: conv features of the previous chunks."""

    context: NDArray[Any]  # [batch, frames, d_audio], frames <= left_context_chunks * 50
    chunks: int = 0  # chunks encoded since the stream opened or was reset

    def reset(self) -> None:
        self.context = self.context[:, :0]
        self.chunks = 0


class AudioEncoderRunner:
    def __init__(self, session: Session, mel_frames: int) -> None:
        self.session = session
        self.n_mels = session.dim("mel", 1)
        self.mel_frames = mel_frames  # per chunk (the manifest's schedule)
        self.d_audio = session.dim("context", 2)

    def new_state(self, batch: int = 1) -> AudioState:
        context = np.zeros((batch, 0, self.d_audio), dtype=self.session.dtype("context"))
        return AudioState(context=context)

    def step(self, mel: NDArray[Any], state: AudioState) -> NDArray[Any]:
        """Encode the next chunk: log-mel [batch, n_mels, mel_frames] -> [batch, tokens, hidden]."""
        want = (state.context.shape[0], self.n_mels, self.mel_frames)
        if mel.shape != want:
            raise EngineError(
                f"audio chunk has shape {mel.shape}; expected {list(want)} (pad the last "
                "chunk with silence)"
            )
        out = self.session.run({"mel": mel, "context": state.context})
        state.context = out["new_context"]
        state.chunks += 1
        return out["tokens"]


class VisionRunner:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.image_size = session.dim("pixels", 2)

    def encode(self, pixels: NDArray[Any]) -> NDArray[Any]:
        """Camera frames [batch, 3, size, size], RGB in [0, 1] -> tokens [batch, n, hidden]."""
        size = self.image_size
        if pixels.ndim != 4 or pixels.shape[1:] != (3, size, size):
            raise EngineError(
                f"camera frame has shape {pixels.shape}; expected [batch, 3, {size}, {size}] "
                "RGB in [0, 1] (resize it first)"
            )
        return self.session.run({"pixels": pixels})["tokens"]
