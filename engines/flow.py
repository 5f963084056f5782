"""The flow runner: S3 speech tokens (25 Hz) -> 80-bin mel (50 Hz), streamed group by group.

Reproduces ``FlowDecoder.step`` of the torch reference with the one-group ``flow_decoder``
graph. Tokens arrive in chunks of ``chunk_tokens`` (C); L = ``lookahead_tokens``. A
non-final chunk emits the mel of every token whose lookahead has arrived and holds back
its last L tokens (and their noise); the ``final`` chunk (1..C tokens, or 0 to flush)
emits everything left, with the missing lookahead padded (``token_mask`` 0). So the
groups are ``[0, C-L), [C-L, 2C-L), ...`` and the last runs to the end. Each group
attends to the encoder cache of the groups before it (KV cache, IO-bound) and to the
last ``prompt_frames`` mel frames emitted (``prompt``, zeros at the start).

An utterance longer than the cache (``DEFAULT_MAX_TOKENS``, five minutes) does not fail:
``FlowState.make_room`` keeps the most recent half of the encoder cache and re-rotates its
keys to start at position 0 (``rope``; the graph numbers a group's positions from the
cache length, so the two stay in step), as the backbone's eviction does.

Noise is ``[batch, mel_bins, 2 x tokens]`` per chunk, scaled by ``temperature`` before the
graph (x_0 = noise * temperature); when not given it is drawn from the state's seeded
generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.kvcache import KVCache, open_kv_cache, run_cached
from venus.engines.manifest import ComponentEntry, Schedule
from venus.engines.rope import Rope
from venus.engines.session import Session
from venus.errors import EngineError

DEFAULT_MAX_TOKENS = 25 * 300  # one utterance of up to 5 min at 25 tokens / s
# The flow encoder's rotary base: ``ROPE_THETA`` of export/model/flow.py (not in the
# manifest: it is fixed by the architecture; a test keeps the two equal).
FLOW_ROPE_THETA = 1e4


@dataclass
class FlowState:
    """One utterance's flow state. ``reset()`` between utterances (or on barge-in)."""

    kv: KVCache  # encoder cache of the emitted tokens
    pending_tokens: NDArray[np.int64]  # [batch, <= lookahead]: received, mel not yet emitted
    pending_noise: NDArray[np.float32]  # [batch, mel_bins, frames of pending_tokens]
    prompt: NDArray[np.float32]  # [batch, mel_bins, prompt_frames]: last frames emitted
    rng: np.random.Generator  # draws noise when the caller passes none
    seed: int
    finished: bool = False

    @property
    def emitted_tokens(self) -> int:
        return self.kv.length

    def make_room(self, tokens: int) -> int:
        """Before a group of ``tokens``: when it would not fit, keep the most recent half
        of the cache, renumbered from position 0; -> tokens dropped."""
        capacity, held = self.kv.capacity, self.kv.length
        if held + tokens <= capacity:
            return 0
        if tokens > capacity:
            raise EngineError(f"flow: a group of {tokens} tokens exceeds its cache of {capacity}")
        keep = min(capacity // 2, capacity - tokens)
        rope = Rope(self.kv.head_dim, FLOW_ROPE_THETA)
        return self.kv.keep(0, keep, lambda keys: rope.rotate(keys, keep - held))

    def reset(self, seed: int | None = None) -> None:
        self.kv.reset()
        self.pending_tokens = self.pending_tokens[:, :0]
        self.pending_noise = self.pending_noise[..., :0]
        self.prompt = np.zeros_like(self.prompt)
        self.seed = self.seed if seed is None else seed
        self.rng = np.random.default_rng(self.seed)
        self.finished = False


class FlowRunner:
    def __init__(self, session: Session, entry: ComponentEntry, schedule: Schedule) -> None:
        self.session, self.entry = session, entry
        self.chunk_tokens = schedule.speech_tokens
        self.lookahead = schedule.lookahead_tokens
        self.frames_per_token = schedule.mel_frames_out
        self.prompt_frames = schedule.prompt_frames
        self.mel_bins = session.dim("noise", 1)
        if self.chunk_tokens <= self.lookahead:
            raise EngineError(
                f"{session.path}: speech_tokens {self.chunk_tokens} per chunk must exceed "
                f"lookahead_tokens {self.lookahead}; re-export with a longer chunk"
            )

    def new_state(
        self, batch: int = 1, seed: int = 0, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> FlowState:
        return FlowState(
            kv=open_kv_cache(self.session, self.entry, batch, max_tokens),
            pending_tokens=np.zeros((batch, 0), dtype=np.int64),
            pending_noise=np.zeros((batch, self.mel_bins, 0), dtype=np.float32),
            prompt=np.zeros((batch, self.mel_bins, self.prompt_frames), dtype=np.float32),
            rng=np.random.default_rng(seed),
            seed=seed,
        )

    def step(
        self,
        tokens: NDArray[np.integer[Any]],
        state: FlowState,
        final: bool = False,
        noise: NDArray[Any] | None = None,
        temperature: float = 1.0,
    ) -> NDArray[np.float32]:
        """Feed one chunk of tokens [batch, m] -> mel [batch, mel_bins, frames emitted].

        Non-final chunks hold exactly ``chunk_tokens`` tokens, the final one 0..chunk_tokens.
        """
        if state.finished:
            raise EngineError("the flow stream already ended (final=True); call state.reset()")
        batch, m = tokens.shape
        if m > self.chunk_tokens or (not final and m != self.chunk_tokens):
            raise EngineError(
                f"flow step got {m} tokens; feed chunks of {self.chunk_tokens} (the final "
                "chunk may be shorter)"
            )
        frames_in = m * self.frames_per_token
        if noise is None:
            noise = state.rng.standard_normal((batch, self.mel_bins, frames_in), np.float32)
        if noise.shape != (batch, self.mel_bins, frames_in):
            raise EngineError(
                f"flow noise has shape {noise.shape}; expected {[batch, self.mel_bins, frames_in]}"
            )
        toks = np.concatenate((state.pending_tokens, tokens.astype(np.int64)), axis=1)
        all_noise = np.concatenate((state.pending_noise, noise.astype(np.float32)), axis=2)
        emit = toks.shape[1] if final else toks.shape[1] - self.lookahead
        frames = emit * self.frames_per_token
        state.pending_tokens, state.pending_noise = toks[:, emit:], all_noise[..., frames:]
        state.finished = final
        if emit == 0:
            return all_noise[..., :0]
        state.make_room(emit)
        mask = np.ones(toks.shape, dtype=np.float32)
        if final:  # the lookahead past the end is padding
            pad = np.zeros((batch, self.lookahead), dtype=np.int64)
            toks = np.concatenate((toks, pad), axis=1)
            mask = np.concatenate((mask, pad.astype(np.float32)), axis=1)
        mel = self._group(toks, mask, all_noise[..., :frames] * temperature, state)
        both = np.concatenate((state.prompt, mel), axis=2)
        state.prompt = both[..., both.shape[2] - self.prompt_frames :]
        return mel

    def _group(
        self,
        tokens: NDArray[np.int64],
        mask: NDArray[np.float32],
        noise: NDArray[np.float32],
        state: FlowState,
    ) -> NDArray[np.float32]:
        """One graph run: tokens / mask [batch, group + L], noise [batch, mel, 2 x group]."""
        batch, group = tokens.shape[0], tokens.shape[1] - self.lookahead
        feeds: dict[str, NDArray[Any]] = {
            "tokens": tokens,
            "token_mask": mask,
            "noise": noise,
            "prompt": state.prompt,
        }
        shape = (batch, self.mel_bins, group * self.frames_per_token)
        out = run_cached(self.session, state.kv, feeds, {"mel": shape}, group)
        return np.asarray(out["mel"], dtype=np.float32)
