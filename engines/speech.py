"""The speech decoder runner: backbone hidden states -> S3 speech tokens, one chunk at a time.

Per chunk: the backbone hidden states of the text spoken in it (the ``condition``) and the
``start`` token are appended to the stream, then up to ``max_tokens`` S3 tokens are chosen
by a ``Sampler`` (``start`` is never chosen) until ``end``. As in the torch reference
(``SpeechDecoder.speak_chunk``) a chosen token is fed back only when another one follows,
so neither ``end`` nor a chunk's last token enters the cache. One state holds a whole reply.

A reply longer than the cache (``DEFAULT_MAX_TOKENS``, about 2.5 minutes) does not fail:
``SpeechState.make_room`` keeps the most recent half and, with the decoder's RoPE from the
manifest, re-rotates the kept keys to start at position 0 (as the backbone's eviction
does, see ``backbone``), so the voice goes on from its recent past.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.kvcache import KVCache, open_kv_cache, run_cached
from venus.engines.manifest import ComponentEntry
from venus.engines.rope import Rope
from venus.engines.sampler import Sampler
from venus.engines.session import Session
from venus.errors import EngineError

DEFAULT_MAX_TOKENS = 4096  # a reply of ~2.5 min at 25 tokens / s plus its text condition


def final_chunk_tokens(per_chunk: int) -> int:
    """The speech budget of the chunk that ends a reply: half a chunk more than the others.
    A chunk's words are heard over the next chunk period, but the last word of a reply often
    starts late in it and runs past (in the training set, 47% of reply ends, by a median
    0.18 s, p90 0.45 s); with only ``per_chunk`` codes its end was cut. The decoder stops at
    ``end`` when the speech does, so the extra codes cost time only where they are said.
    Training (``train.speech_batch``) and the daemon (``frontend.step``) both use this."""
    return per_chunk + per_chunk // 2


@dataclass
class SpeechState:
    """One reply's speech-decoder state: its KV cache and the next position."""

    kv: KVCache
    positions: int = 0
    rope: Rope | None = None  # re-rotates kept keys in make_room; None: positions grow

    def reset(self) -> None:
        self.kv.reset()
        self.positions = 0

    def make_room(self, tokens: int) -> int:
        """Before appending up to ``tokens``: when they would not fit, keep only the most
        recent half of the cache (less if ``tokens`` needs more room); -> tokens dropped."""
        capacity = self.kv.capacity
        if self.kv.length + tokens <= capacity:
            return 0
        if tokens > capacity:
            raise EngineError(
                f"speech decoder: {tokens} tokens for one chunk exceed its cache of {capacity}"
            )
        keep = min(capacity // 2, capacity - tokens)
        rope = self.rope
        if rope is None:
            return self.kv.keep(0, keep)
        delta = keep - self.positions
        dropped = self.kv.keep(0, keep, lambda keys: rope.rotate(keys, delta))
        self.positions = keep
        return dropped


@dataclass(frozen=True)
class SpeechChunk:
    tokens: NDArray[np.int64]  # [n] S3 codes, n <= max_tokens; never ``start`` or ``end``
    ended: bool  # the decoder chose ``end``: the reply is over


class SpeechDecoderRunner:
    def __init__(
        self,
        session: Session,
        entry: ComponentEntry,
        start_token: int,
        end_token: int,
        rope: Rope | None = None,
    ) -> None:
        self.session, self.entry, self.rope = session, entry, rope
        self.start_token, self.end_token = start_token, end_token
        self.cond_dim = session.dim("condition", 2)
        self.vocab = session.dim("logits", 2)

    def new_state(self, max_tokens: int = DEFAULT_MAX_TOKENS) -> SpeechState:
        """A fresh reply (batch 1) holding up to ``max_tokens`` condition + speech tokens."""
        kv = open_kv_cache(self.session, self.entry, 1, max_tokens)
        return SpeechState(kv=kv, rope=self.rope)

    def forward(
        self, condition: NDArray[Any], input_ids: NDArray[np.int64], state: SpeechState
    ) -> NDArray[Any]:
        """Append condition [1, c, cond_dim] then ids [1, s] -> logits [1, c + s, vocab]."""
        c, s = condition.shape[1], input_ids.shape[1]
        positions = np.arange(state.positions, state.positions + c + s, dtype=np.int64)
        feeds = {
            "condition": condition,
            "input_ids": input_ids,
            "attention_mask": np.ones((1, state.kv.length + c + s), dtype=np.int64),
            "position_ids": positions[None],
        }
        out = run_cached(self.session, state.kv, feeds, {"logits": (1, c + s, self.vocab)}, c + s)
        state.positions += c + s
        return out["logits"]

    def speak(
        self, hidden: NDArray[Any], state: SpeechState, sampler: Sampler, max_tokens: int
    ) -> SpeechChunk:
        """Decode one chunk: backbone hidden states [1, n, cond_dim] -> up to ``max_tokens``."""
        if hidden.ndim != 3 or hidden.shape[0] != 1 or hidden.shape[2] != self.cond_dim:
            raise EngineError(
                f"speech condition has shape {hidden.shape}; expected [1, n, {self.cond_dim}]"
            )
        state.make_room(hidden.shape[1] + 1 + max_tokens)  # condition, start, the tokens
        forward = functools.partial(self.forward, state=state)
        return speak_loop(forward, hidden, self.start_token, self.end_token, sampler, max_tokens)


Forward = Callable[[NDArray[Any], NDArray[np.int64]], NDArray[Any]]


def speak_loop(
    forward: Forward,
    hidden: NDArray[Any],
    start_token: int,
    end_token: int,
    sampler: Sampler,
    max_tokens: int,
) -> SpeechChunk:
    """The decoding loop of one chunk over any ``forward(condition, ids) -> logits`` (the
    engines' and, in ``venus bench``, the torch reference's): ``start`` is never chosen,
    and a token is fed back only when another one follows."""
    empty = np.zeros((1, 0, hidden.shape[2]), dtype=np.float32)
    condition, ids = hidden, np.array([[start_token]], dtype=np.int64)
    out: list[int] = []
    for i in range(max_tokens):
        logits = forward(condition, ids)
        scores = np.array(logits[0, -1], dtype=np.float32)
        scores[start_token] = -np.inf  # input-only, never emitted
        token = sampler(scores)
        if token == end_token:
            return SpeechChunk(tokens=np.array(out, dtype=np.int64), ended=True)
        out.append(token)
        if i + 1 < max_tokens:
            condition, ids = empty, np.array([[token]], dtype=np.int64)
    return SpeechChunk(tokens=np.array(out, dtype=np.int64), ended=False)
