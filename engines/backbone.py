"""The backbone runner: token embedding graph + backbone graph + KV cache, numpy in and out.

``prefill`` appends any embeddings (audio / vision tokens, embedded text) to the stream,
``step`` embeds token ids and appends them; both return the logits and the final hidden
states (the speech decoder's condition) of the new tokens. Positions and the attention
mask continue across calls; the cache is bound with IO binding (see ``kvcache``).

``BackboneState.evict`` bounds a long session StreamingLLM-style (Xiao et al., 2023):
keep the first tokens (attention sinks) and the most recent ones, drop the middle, and
renumber positions within the cache. The graph caches keys already rotated by RoPE, but a
rotation composes (R(p - d) k = R(-d) R(p) k, see ``rope``), so the kept recent keys are
re-rotated by minus the number of tokens dropped: they move to the positions right after
the sinks, the next token continues from ``keep_first + keep_last``, and positions never
exceed the cache's capacity. Relative positions among the recent tokens are unchanged;
the sinks now sit closer to them, as in StreamingLLM. Values carry no position.

The rotation needs the backbone's ``rope_theta`` from the manifest (``rope_of``). Engines
exported before the manifest carried it get no rope: eviction then drops the middle
without re-rotating, positions keep growing with the session (a gap where the middle
was; past the backbone's ``max_positions`` RoPE runs beyond the lengths the model was
trained on), and the first eviction logs a warning to re-export.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.kvcache import KVCache, open_kv_cache, run_cached
from venus.engines.manifest import MANIFEST, ComponentEntry
from venus.engines.rope import Rope
from venus.engines.session import Session
from venus.errors import EngineError

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 8192  # the daemon's default schedule.max_context_tokens
_WARNED: set[Path] = set()  # engine directories already warned about evicting without RoPE


@dataclass
class BackboneState:
    """One stream's backbone state: the KV cache, its attention mask and the next position."""

    kv: KVCache
    mask: NDArray[np.int64]  # [batch, capacity]: 1 where a cached token may be attended
    positions: int = 0  # next position id
    rope: Rope | None = None  # re-rotates kept keys on eviction; None: positions keep growing

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
        -> tokens dropped. With a rope the kept last keys move to the positions right after
        the first ones and the next position is ``keep_first + keep_last``; without, position
        ids continue where they were (see the module docstring). The attention mask stays
        all ones over the tokens held."""
        rope = self.rope
        if rope is None:
            dropped = self.kv.keep(keep_first, keep_last)
            if dropped:
                _warn_growing(self.kv.session.path)
            return dropped
        kept = keep_first + keep_last
        # The last cached token sits at positions - 1: move it to kept - 1. For a stream
        # that started at position 0 and was always rebased, that is minus the tokens dropped.
        delta = kept - self.positions
        dropped = self.kv.keep(keep_first, keep_last, lambda keys: rope.rotate(keys, delta))
        if dropped:
            self.positions = kept
        return dropped


def _warn_growing(graph: Path) -> None:
    root = graph.parent
    if root in _WARNED:
        return
    _WARNED.add(root)
    log.warning(
        "%s: the manifest gives no backbone rope_theta (exported by an older release), so "
        "evicting old context cannot re-rotate the kept keys: position ids keep growing with "
        "the session and pass the backbone's max_positions in a long one; re-run `venus "
        "export` to bound them",
        root / MANIFEST,
    )


@dataclass(frozen=True)
class BackboneOutput:
    logits: NDArray[Any]  # [batch, new, vocab]
    hidden: NDArray[Any]  # [batch, new, hidden], final norm applied


class BackboneRunner:
    def __init__(
        self,
        embedding: Session,
        backbone: Session,
        entry: ComponentEntry,
        rope: Rope | None = None,
    ) -> None:
        """``rope``: the backbone's RoPE (``rope_of(manifest)``), for eviction to renumber
        positions; None (older manifests) keeps them growing."""
        self.embedding, self.backbone, self.entry, self.rope = embedding, backbone, entry, rope
        self.hidden_size = backbone.dim("inputs_embeds", 2)
        self.vocab = backbone.dim("logits", 2)

    def new_state(self, batch: int = 1, max_tokens: int = DEFAULT_MAX_TOKENS) -> BackboneState:
        """A fresh stream holding up to ``max_tokens`` tokens (preallocated now)."""
        kv = open_kv_cache(self.backbone, self.entry, batch, max_tokens)
        mask = np.ones((batch, max_tokens), dtype=np.int64)
        return BackboneState(kv=kv, mask=mask, rope=self.rope)

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
