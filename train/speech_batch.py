"""The speech decoder's teacher-forced sequences: per reply, what the daemon feeds it.

The daemon (``daemon/frontend/step.py``, ``engines/speech.py``) keeps one speech-decoder
state per reply. For every chunk of the reply with spoken text it appends the backbone's
hidden states at the spoken tokens' positions (the ``condition``), then ``start``, and
then decodes up to ``tokens_per_chunk`` speech tokens, each fed back only when another one
follows (so a full chunk's last token never enters the state). So a reply's sequence is::

    cond(chunk a) start u0 .. u23 | cond(chunk b) start u0 .. u23 | ... cond(last) start u0 .. um

with the targets ``start -> u0``, ``u_i -> u_(i+1)``. The targets are the speech units of
what the chunk decided to say (``speech_units.decided_units``: the assistant's audio in
the next chunk's second, where the data and the daemon both play it). The reply's last
chunk (``turn_eos``) has the daemon's larger budget (``engines.speech.final_chunk_tokens``:
half a chunk more, the first codes of the following, listening, chunk's second), since
the last word often runs past its second. It ends at its speech: its trailing silence
codes are cut and its last unit predicts ``end`` (what stops the decoder early), unless
the budget is full. A chunk with no spoken text (a delegation alone) has no condition,
and the daemon decodes no speech for it: it is left out here too. A reply cut by
``listen`` has no ``end``: the daemon stops it from outside.

Teacher forcing feeds the decoder the data's units, the daemon its own (exposure bias:
the fifth round measured 95% of the units right teacher-forced and 85% closed loop,
docs/training-log.md). Two remedies here:

- ``scheduled``: scheduled sampling for a parallel decoder (Mihaylova & Martins, 2019,
  "Scheduled Sampling for Transformers"): a first pass without gradient gives the
  decoder's greedy choice at every position, and a share of the fed units is replaced by
  the choice made one position earlier. ``start`` is never replaced and ``end`` is never
  fed; the targets stay the data's.
- ``closed_loop_right``: the measure, greedy and sequential as the daemon decodes (one
  position at a time with a KV cache), each fed unit the decoder's own previous choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from numpy.typing import NDArray
from torch import Tensor

from venus.engines.speech import final_chunk_tokens
from venus.export.model.speech import SpeechDecoder
from venus.train.layout import IGNORE
from venus.train.speech_units import SILENCE

__all__ = [
    "SpeechBatch", "SpeechLoss", "closed_loop_choices", "closed_loop_right", "reply_rows",
    "scheduled", "speech_batch", "speech_logits", "speech_loss",
]  # fmt: skip

COND, TOKEN = 1, 2  # what fills a position of a speech row (0: padding)


@dataclass
class Row:
    """One reply's sequence: per position a condition (its layout position) or a token."""

    kind: list[int]
    source: list[int]  # COND: the position in the example's layout; TOKEN: the token id
    labels: list[int]


@dataclass
class SpeechBatch:
    example: Tensor  # [R] the batch row each reply comes from
    kind: Tensor  # [R, L] COND, TOKEN or 0 (padding)
    source: Tensor  # [R, L]
    labels: Tensor  # [R, L] target id or IGNORE
    mask: Tensor  # [R, L]

    def to(self, device: torch.device) -> SpeechBatch:
        """The rows with their tensors on ``device``."""
        parts = (self.example, self.kind, self.source, self.labels, self.mask)
        return SpeechBatch(*(t.to(device, non_blocking=True) for t in parts))


@dataclass
class SpeechLoss:
    loss: Tensor
    tokens: int
    right: int


def reply_rows(
    decisions: Sequence[str],
    spoken: Sequence[int],
    units: NDArray[np.int64],
    start_token: int,
    end_token: int,
) -> list[Row]:
    """The speech rows of one example (module doc). ``decisions``: per chunk, the data's
    decision; ``spoken``: per layout position, the chunk whose spoken token it is (or -1,
    ``Layout.speech``); ``units``: [chunks, tokens_per_chunk]."""
    positions: dict[int, list[int]] = {}
    for pos, chunk in enumerate(spoken):
        if chunk >= 0:
            positions.setdefault(chunk, []).append(pos)
    per_chunk = units.shape[1]
    tail = final_chunk_tokens(per_chunk) - per_chunk
    rows: list[Row] = []
    row: Row | None = None
    for k, decision in enumerate(decisions):
        if decision == "listen":
            row = None
            continue
        if row is None:
            row = Row([], [], [])
            rows.append(row)
        conds = positions.get(k, [])
        if conds:
            codes = [int(c) for c in units[k]]
            final = decision == "turn_eos"
            if final:
                if k + 1 < len(decisions) and decisions[k + 1] == "listen":
                    codes += [int(c) for c in units[k + 1][:tail]]  # the last word's end
                while codes and codes[-1] == SILENCE:
                    codes.pop()
            row.kind += [COND] * len(conds)
            row.source += conds
            row.labels += [IGNORE] * len(conds)
            full = per_chunk + tail if final else per_chunk
            targets = codes + ([end_token] if final and len(codes) < full else [])
            fed = [start_token, *codes][: len(targets)]
            row.kind += [TOKEN] * len(fed)
            row.source += fed
            row.labels += targets
        if decision == "turn_eos":
            row = None
    return [r for r in rows if any(label != IGNORE for label in r.labels)]


def speech_batch(rows: Sequence[Sequence[Row]]) -> SpeechBatch | None:
    """Every example's rows (``rows[b]``: example ``b``'s) padded into one batch."""
    flat = [(b, r) for b, example_rows in enumerate(rows) for r in example_rows]
    if not flat:
        return None
    length = max(len(r.kind) for _b, r in flat)

    def pad(values: list[int], fill: int) -> list[int]:
        return values + [fill] * (length - len(values))

    return SpeechBatch(
        example=torch.tensor([b for b, _r in flat]),
        kind=torch.tensor([pad(r.kind, 0) for _b, r in flat]),
        source=torch.tensor([pad(r.source, 0) for _b, r in flat]),
        labels=torch.tensor([pad(r.labels, IGNORE) for _b, r in flat]),
        mask=torch.tensor([pad([1] * len(r.kind), 0) for _b, r in flat]),
    )


def _inputs(decoder: SpeechDecoder, hidden: Tensor, batch: SpeechBatch) -> Tensor:
    """The decoder's inputs [R, L, hidden]: the fed tokens' embeddings, the conditions
    from the backbone's ``hidden`` [B, L, H] in their places."""
    tokens = torch.where(batch.kind == TOKEN, batch.source, torch.zeros_like(batch.source))
    x = decoder.embed(tokens)
    rows, cols = torch.nonzero(batch.kind == COND, as_tuple=True)
    cond = decoder.condition(hidden[batch.example[rows], batch.source[rows, cols]])
    return x.index_put((rows, cols), cond)


def _fed_units(batch: SpeechBatch) -> Tensor:
    """[R, L] where a data unit is fed: a token whose previous position has a target (so
    not ``start``, which follows a condition)."""
    targeted = F.pad(batch.labels[:, :-1] != IGNORE, (1, 0), value=False)
    return (batch.kind == TOKEN) & targeted


def _choices(decoder: SpeechDecoder, logits: Tensor) -> Tensor:
    """Greedy choices [..] from logits [.., vocab], ``start`` excluded (input only, as the
    daemon's sampler)."""
    scores = logits.detach().clone()
    scores[..., decoder.cfg.start_token] = float("-inf")
    return scores.argmax(dim=-1)


def scheduled(
    decoder: SpeechDecoder,
    hidden: Tensor,
    batch: SpeechBatch,
    share: float,
    generator: torch.Generator | None = None,
) -> SpeechBatch:
    """``batch`` with about ``share`` of its fed units replaced by the decoder's own greedy
    choice at the position before (module doc). ``share`` 0 returns ``batch`` itself."""
    if share <= 0:
        return batch
    with torch.no_grad():  # a choice where there is a target: all a fed unit follows
        target = batch.labels != IGNORE
        own = torch.zeros_like(batch.source)
        own[target] = _choices(decoder, decoder.lm_head(_hidden(decoder, hidden, batch)[target]))
    before = F.pad(own[:, :-1], (1, 0))
    draw = torch.rand(batch.kind.shape, generator=generator, device=generator.device
                      if generator is not None else batch.kind.device)  # fmt: skip
    swap = _fed_units(batch) & (before != decoder.cfg.end_token) & (draw < share)
    source = torch.where(swap, before, batch.source)
    return SpeechBatch(batch.example, batch.kind, source, batch.labels, batch.mask)


@torch.no_grad()
def closed_loop_choices(decoder: SpeechDecoder, hidden: Tensor, batch: SpeechBatch) -> Tensor:
    """The decoder's greedy choice at every position [R, L] when every unit it is fed is its
    own previous choice, decoded position by position as the daemon does (module doc). Where
    it chose ``end`` before the data did, the data's unit is fed in its place (the daemon
    would stop the chunk there; the choice counts as wrong)."""
    x = _inputs(decoder, hidden, batch)
    fed = _fed_units(batch)
    cache = decoder.new_cache(batch.kind.shape[0])
    chosen: list[Tensor] = []
    for t in range(batch.kind.shape[1]):
        step = x[:, t : t + 1]
        if chosen:
            own = fed[:, t] & (chosen[-1] != decoder.cfg.end_token)
            step = torch.where(own[:, None, None], decoder.embed(chosen[-1])[:, None], step)
        logits, _hidden = decoder.step(step, cache)
        chosen.append(_choices(decoder, logits[:, 0]))
    return torch.stack(chosen, dim=1)


def closed_loop_right(decoder: SpeechDecoder, hidden: Tensor, batch: SpeechBatch) -> int:
    """Targets ``closed_loop_choices`` gets right."""
    choices = closed_loop_choices(decoder, hidden, batch)
    return int(((choices == batch.labels) & (batch.labels != IGNORE)).sum())


def _hidden(decoder: SpeechDecoder, hidden: Tensor, batch: SpeechBatch) -> Tensor:
    """The speech decoder's final hidden states [R, L, H] over the rows (right-padded),
    its inputs built from the backbone's ``hidden`` [B, L, H] and the fed tokens."""
    return decoder.hidden_states(_inputs(decoder, hidden, batch))


def speech_logits(decoder: SpeechDecoder, hidden: Tensor, batch: SpeechBatch) -> Tensor:
    """The speech decoder's logits [R, L, vocab] at every position of the rows, through its
    exported ``forward`` (the padding mask), its inputs built from the backbone's
    ``hidden`` [B, L, H] (the conditions) and the fed tokens: the reference that
    training's pass (``speech_loss``, ``scheduled``) is checked against."""
    x = _inputs(decoder, hidden, batch)
    n, length = batch.kind.shape
    empty = decoder.new_cache(n)
    positions = torch.arange(length, device=x.device)[None].expand(n, length)
    logits: Tensor = decoder(x, batch.mask, positions, empty.keys, empty.values)[0]
    return logits


def speech_loss(decoder: SpeechDecoder, hidden: Tensor, batch: SpeechBatch) -> SpeechLoss:
    """Cross-entropy of the speech decoder over every target: ``speech_logits`` at the
    targets alone, through ``hidden_states`` (the logits of the padding and of the
    conditions are never made)."""
    target = batch.labels != IGNORE
    t_logits = decoder.lm_head(_hidden(decoder, hidden, batch)[target])
    t_labels = batch.labels[target]
    return SpeechLoss(
        loss=F.cross_entropy(t_logits, t_labels),
        tokens=len(t_labels),
        right=int((t_logits.argmax(dim=1) == t_labels).sum()),
    )
