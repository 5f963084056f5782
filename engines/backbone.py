"""The backbone runner: token embedding graph + backbone graph + KV cache, numpy in and out.

``prefill`` appends any embeddings (audio / vision tokens, embedded text) to the stream,
``step`` embeds token ids and appends them; both return the logits and the final hidden
states (the speech decoder's condition) of the new tokens. Positions and the attention
mask continue across calls; the cache is bound with IO binding (see ``kvcache``).

``BackboneState.evict`` bounds a long session StreamingLLM-style (Xiao et al., 2023):
keep the first tokens (attention sinks) and the most recent ones, drop the middle.
Positions are not renumbered and the kept keys are not re-rotated: each key keeps the
RoPE rotation of the position it was computed at and new tokens continue from the next
position id, so the model sees a gap in positions where the middle was. (StreamingLLM
proper re-assigns positions within the cache, which needs un-rotated keys; the exported
graph caches rotated ones.) Positions therefore still grow with the session; past the
backbone's ``max_positions`` RoPE runs beyond the lengths the model was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.kvcache import KVCache, open_kv_cache, run_cached
from venus.engines.manifest import ComponentEntry
from venus.engines.session import Session
from venus.errors import EngineError

DEFAULT_MAX_TOKENS = 8192  # the daemon's default schedule.max_context_tokens


@dataclass
class BackboneState:
    """One stream's backbone state: the KV cache, its attention mask and the next position."""

    kv: KVCache
    mask: NDArray[np.int64]  # [batch, capacity]: 1 where a cached token may be attended
    positions: int = 0  # next position id

    @property
    def length(self) -> int:
        """Tokens in the cache."""
        return self.kv.length

    def reset(self) -> None:
        self.kv.reset()
        self.mask[:] = 1
        self.positions = 0

    def evict(self, keep_first: int, keep_last: int) -> int:
        """Drop all but the first ``keep_first`` and the last ``keep_last`` cached tokens;
        -> tokens dropped. Position ids continue where they were (see the module docstring);
        the attention mask stays all ones over the tokens held."""
        return self.kv.keep(keep_first, keep_last)


@dataclass(frozen=True)
class BackboneOutput:
    logits: NDArray[Any]  # [batch, new, vocab]
    hidden: NDArray[Any]  # [batch, new, hidden], final norm applied


class BackboneRunner:
    def __init__(self, embedding: Session, backbone: Session, entry: ComponentEntry) -> None:
        self.embedding, self.backbone, self.entry = embedding, backbone, entry
        self.hidden_size = backbone.dim("inputs_embeds", 2)
        self.vocab = backbone.dim("logits", 2)

    def new_state(self, batch: int = 1, max_tokens: int = DEFAULT_MAX_TOKENS) -> BackboneState:
        """A fresh stream holding up to ``max_tokens`` tokens (preallocated now)."""
        kv = open_kv_cache(self.backbone, self.entry, batch, max_tokens)
        return BackboneState(kv=kv, mask=np.ones((batch, max_tokens), dtype=np.int64))

    def embed(self, input_ids: NDArray[np.integer[Any]]) -> NDArray[Any]:
        """Token ids [batch, sequence] -> embeddings [batch, sequence, hidden]."""
        ids = np.asarray(input_ids)
        if ids.ndim != 2:
            raise EngineError(f"token ids have shape {ids.shape}; pass [batch, sequence]")
        return self.embedding.run({"input_ids": ids})["inputs_embeds"]

    def prefill(self, embeds: NDArray[Any], state: BackboneState) -> BackboneOutput:
        """Append embeddings [batch, new, hidden] to the stream -> logits and hidden states."""
        b, t = _check(embeds, state.kv.batch, self.hidden_size, "backbone embeddings")
        total = state.length + t
        positions = np.arange(state.positions, state.positions + t, dtype=np.int64)
        feeds = {
            "inputs_embeds": embeds,
            "attention_mask": state.mask[:, :total],
            "position_ids": np.broadcast_to(positions, (b, t)),
        }
        outputs = {"logits": (b, t, self.vocab), "hidden_states": (b, t, self.hidden_size)}
        out = run_cached(self.backbone, state.kv, feeds, outputs, t)
        state.positions += t
        return BackboneOutput(logits=out["logits"], hidden=out["hidden_states"])

    def step(self, input_ids: NDArray[np.integer[Any]], state: BackboneState) -> BackboneOutput:
        """Embed token ids [batch, new] and append them -> logits and hidden states."""
        return self.prefill(self.embed(input_ids), state)


def _check(x: NDArray[Any], batch: int, width: int, what: str) -> tuple[int, int]:
    if x.ndim != 3 or x.shape[0] != batch or x.shape[2] != width:
        raise EngineError(
            f"{what} have shape {x.shape}; expected [{batch}, tokens, {width}] "
            "(batch as the stream was opened with)"
        )
    return x.shape[0], x.shape[1]
