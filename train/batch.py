"""Examples to padded tensors, the teacher-forced forward pass and the losses.

The forward pass is the daemon's computation in one go: the audio encoder over every
chunk of the sample (``encode_chunks``, the streaming ``step`` batched), the vision
encoder over the frames the chunks see, their tokens spliced into the token embeddings
at their slots, and one causal pass of the backbone over the flat sequence (equal to
the daemon's prefill and step calls; ``layout.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor

from venus.export.model.venus import VenusModel
from venus.train.addressee import NONE, AddresseeHead, addressee_loss
from venus.train.data import Example
from venus.train.heard import Heard, HeardResult, ListenHead, heard_loss, shifted
from venus.train.layout import AUDIO, IGNORE, VISION
from venus.train.speech_batch import (
    SpeechBatch,
    closed_loop_right,
    reply_rows,
    scheduled,
    speech_batch,
    speech_loss,
)

__all__ = ["Batch", "Losses", "collate", "forward_losses"]

MEL_FRAMES_PER_S = 100  # the audio encoder's log-mel rate (10 ms hop)


@dataclass
class Batch:
    ids: Tensor  # [B, L] token ids (0 at slots and padding)
    kind: Tensor  # [B, L]
    slot: Tensor  # [B, L]
    labels: Tensor  # [B, L]
    decision: Tensor  # [B, L] bool
    turn: Tensor  # [B, L] bool: a decision that starts a reply or yields (layout.py)
    event: Tensor  # [B, L] bool: a decision an overlap event is decided in (layout.py)
    after: Tensor  # [B, L] bool: carrying on in the chunks just after a hold (layout.py)
    opening: Tensor  # [B, L] bool: a text target of a reply's first chunk (layout.py)
    choice: Tensor  # [B, L] bool: a target naming a call's capability (layout.py)
    argument: Tensor  # [B, L] bool: a target of a call's argument value (layout.py)
    reading: Tensor  # [B, L] bool: spoken text of a reply that delivers a result (layout.py)
    copied: Tensor  # [B, L] bool: of those, a token the result has (layout.py)
    mask: Tensor  # [B, L] 1 where real
    mel: Tensor  # [B, 80, max_chunks * 100]
    frames: Tensor | None  # [F, 3, S, S] every example's frames, concatenated
    frame_offset: Tensor  # [B] where each example's frames start in ``frames``
    speech: SpeechBatch | None = None  # the speech decoder's rows (examples with units)
    heard: tuple[tuple[Heard, ...], ...] = ()  # per row, the user turns it holds (heard.py)
    chunks: tuple[int, ...] = ()  # per row, its chunks (the rest of ``mel`` is padding)
    addressed: Tensor | None = None  # [B, L] at decisions: whom the chunk's speech is for

    def to(self, device: torch.device) -> Batch:
        """The batch with its tensors on ``device`` (itself when they are there)."""
        if self.ids.device == device:
            return self
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor):
                moved[name] = value.to(device, non_blocking=True)
        moved["speech"] = None if self.speech is None else self.speech.to(device)
        return Batch(**moved)


@dataclass
class Losses:
    total: Tensor
    decision: Tensor  # 3-way cross-entropy over the control tokens, at decision positions
    text: Tensor  # full-vocabulary cross-entropy on the text phase
    decisions: int
    decisions_right: int
    speak_targets: int
    speak_right: int  # speak targets decided speak
    speak_said: int  # positions decided speak
    turns: int  # decisions that change course (start a reply, or yield in one)
    turns_right: int
    text_tokens: int
    text_right: int
    opening_tokens: int  # text targets in the chunks that start a reply
    opening_right: int
    first_tokens: int = 0  # a reply's first text target (the answer chosen): one a reply
    first_right: int = 0
    choice_tokens: int = 0  # targets naming a call's capability: which tool it picked
    choice_right: int = 0
    argument_tokens: int = 0  # targets of a call's argument values: what it heard asked
    argument_right: int = 0
    argument_values: int = 0  # those values (runs of such targets): each one whole
    argument_values_right: int = 0  # of those, every token right
    reading_tokens: int = 0  # spoken text targets of replies that deliver a result
    reading_right: int = 0
    copied_tokens: int = 0  # of those, tokens the result has too
    copied_right: int = 0
    events: int = 0  # decisions an overlap event is decided in
    events_right: int = 0
    holds: int = 0  # of those, the ones that carry on (continue through it)
    holds_right: int = 0
    afters: int = 0  # decisions carrying on in the chunks just after a hold
    afters_right: int = 0
    speech: Tensor | None = None  # the speech decoder's cross-entropy (with units)
    speech_tokens: int = 0
    speech_right: int = 0
    speech_closed_right: int = 0  # right with its own units fed back (``closed_loop``)
    heard: HeardResult | None = None  # the listening loss (with a ListenHead)
    addressee: Tensor | None = None  # the addressee loss (with an AddresseeHead)
    addressed: tuple[int, ...] = ()  # per class: decisions whose chunk hears such speech
    addressed_right: tuple[int, ...] = ()  # per class: of those, named right by the head


def collate(examples: Sequence[Example], speech_ids: tuple[int, int] | None = None) -> Batch:
    """The examples padded into one batch; with ``speech_ids`` (the speech decoder's
    ``start`` and ``end``) also the speech rows of the examples that have units."""
    n = len(examples)
    length = max(len(e.layout) for e in examples)
    frames_max = max(e.mel.shape[1] for e in examples)

    def field(name: str, fill: int) -> Tensor:
        out = np.full((n, length), fill, np.int64)
        for i, e in enumerate(examples):
            values = getattr(e.layout, name)
            out[i, : len(values)] = values
        return torch.from_numpy(out)

    mel = np.zeros((n, examples[0].mel.shape[0], frames_max), np.float32)
    for i, e in enumerate(examples):
        mel[i, :, : e.mel.shape[1]] = e.mel
    offsets, images, total = [], [], 0
    for e in examples:
        offsets.append(total)
        if e.frames is not None and len(e.frames):
            images.append(e.frames)
            total += len(e.frames)
    return Batch(
        ids=field("ids", 0),
        kind=field("kind", 0),
        slot=field("slot", 0),
        labels=field("labels", IGNORE),
        decision=field("decision", 0).bool(),
        turn=field("turn", 0).bool(),
        event=field("event", 0).bool(),
        after=field("after", 0).bool(),
        opening=field("opening", 0).bool(),
        choice=field("choice", 0).bool(),
        argument=field("argument", 0).bool(),
        reading=field("reading", 0).bool(),
        copied=field("copied", 0).bool(),
        mask=torch.from_numpy(
            np.array([[1] * len(e.layout) + [0] * (length - len(e.layout)) for e in examples])
        ),
        mel=torch.from_numpy(mel),
        frames=torch.from_numpy(np.concatenate(images)) if images else None,
        frame_offset=torch.tensor(offsets, dtype=torch.int64),
        speech=None if speech_ids is None else _speech_rows(examples, *speech_ids),
        heard=tuple(shifted(e.heard, e.start, len(e.chunks)) for e in examples),
        chunks=tuple(len(e.chunks) for e in examples),
        addressed=_addressed(examples, length),
    )


def _addressed(examples: Sequence[Example], length: int) -> Tensor:
    """Each example's per-chunk addressee classes at its decision positions (one a
    chunk, in order), ``NONE`` elsewhere."""
    out = np.full((len(examples), length), NONE, np.int64)
    for i, e in enumerate(examples):
        at = np.flatnonzero(e.layout.decision)
        n = min(len(at), len(e.addressed))
        out[i, at[:n]] = e.addressed[:n]
    return torch.from_numpy(out)


def _speech_rows(examples: Sequence[Example], start: int, end: int) -> SpeechBatch | None:
    return speech_batch([
        [] if e.units is None else reply_rows(e.decisions, e.layout.speech, e.units, start, end)
        for e in examples
    ])  # fmt: skip


def embeddings(model: VenusModel, batch: Batch) -> Tensor:
    """The backbone's input: token embeddings with the audio and vision tokens spliced in."""
    return _embed(model, batch)[0]


def _embed(model: VenusModel, batch: Batch) -> tuple[Tensor, Tensor]:
    """``embeddings`` and the audio encoder's frames before pooling [B, chunks * 50, d]."""
    bb = model.backbone
    emb: Tensor = bb.embed(batch.ids)
    audio, frames = model.audio_encoder.encode_chunk_frames(batch.mel)  # [B, chunks * 10, H]
    rows, cols = torch.nonzero(batch.kind == AUDIO, as_tuple=True)
    emb = emb.index_put((rows, cols), audio[rows, batch.slot[rows, cols]])
    if batch.frames is not None and model.vision_encoder is not None:
        vision = model.vision_encoder(batch.frames)  # [F, q, H]
        q = vision.shape[1]
        rows, cols = torch.nonzero(batch.kind == VISION, as_tuple=True)
        slot = batch.slot[rows, cols]
        frame = batch.frame_offset[rows] + torch.div(slot, q, rounding_mode="floor")
        emb = emb.index_put((rows, cols), vision[frame, slot % q])
    return emb, frames


def _weighted_ce(logits: Tensor, target: Tensor, *marks: tuple[Tensor, float]) -> Tensor:
    """Cross-entropy averaged with the rows of each ``(marked, weight)`` counting
    ``weight`` times more (a row marked twice, the product; 0 with a gradient path when
    there are no rows)."""
    w = torch.ones(len(target), device=logits.device)
    for marked, weight in marks:
        w = w * (1.0 + (weight - 1.0) * marked.float())
    return _mean_ce(logits, target, w)


def _runs_wrong(marked: Tensor, right: Tensor) -> Tensor:
    """Per run of consecutive ``marked`` rows (an argument value's tokens: two values have
    a key between them), how many of its rows are not ``right``."""
    start = marked & ~F.pad(marked[:-1], (1, 0))
    run = torch.cumsum(start.long(), 0) - 1
    wrong = torch.zeros(int(start.sum()), dtype=torch.long, device=marked.device)
    return wrong.index_add(0, run[marked], (~right[marked]).long())


def _mean_ce(logits: Tensor, target: Tensor, w: Tensor) -> Tensor:
    """Cross-entropy averaged with row weights ``w`` (0 with a gradient path when there
    are no rows)."""
    if not len(target):
        return logits.sum() * 0
    each = F.cross_entropy(logits, target, reduction="none")
    return (each * w).sum() / w.sum()


def decision_weights(
    turn: Tensor,
    event: Tensor,
    turn_weight: float,
    event_weight: float = 1.0,
    after: Tensor | None = None,
    after_weight: float = 1.0,
) -> Tensor:
    """Each decision's weight in the decision loss: ``turn_weight`` where it changes
    course, at least ``event_weight`` where an overlap event is decided (its yield and
    its hold alike), at least ``after_weight`` where it carries on just after a hold
    (``after``), 1 elsewhere."""
    w = 1.0 + (turn_weight - 1.0) * turn.float()
    w = torch.where(event, w.clamp(min=event_weight), w)
    return w if after is None else torch.where(after, w.clamp(min=after_weight), w)


def forward_losses(
    model: VenusModel,
    batch: Batch,
    control_ids: Sequence[int],
    decision_weight: float = 1.0,
    speech_weight: float = 1.0,
    speech_grad: bool = False,
    turn_weight: float = 1.0,
    listen: ListenHead | None = None,
    ctc_weight: float = 0.0,
    reply_weight: float = 1.0,
    *,
    call_weight: float = 1.0,
    argument_weight: float = 1.0,
    event_weight: float = 1.0,
    after_weight: float = 1.0,
    addressee: AddresseeHead | None = None,
    addressee_weight: float = 0.0,
    speech_sampling: float = 0.0,
    generator: torch.Generator | None = None,
    closed_loop: bool = False,
) -> Losses:
    """Teacher-forced logits and the losses (module doc). With speech rows in the batch,
    also the speech decoder's loss, on the backbone's hidden states (detached unless
    ``speech_grad``: the speech loss then trains the backbone too). Decisions that change
    course count ``turn_weight`` times in the decision loss, and those an overlap event is
    decided in at least ``event_weight`` times, those that carry on just after a hold at
    least ``after_weight`` times (``decision_weights``). With ``listen``, the
    listening loss on the user's turns (``heard.py``), weighted ``ctc_weight``; with
    ``addressee``, the addressee loss at the decisions (``addressee.py``), weighted
    ``addressee_weight``. The text
    targets of a reply's first chunk (``opening``) count ``reply_weight`` times, and the
    one that names a call's capability (``choice``) ``call_weight`` times more, those of a
    call's argument values (``argument``) ``argument_weight`` times more. The
    speech decoder is fed its own units for ``speech_sampling`` of the data's (drawn with
    ``generator``; ``speech_batch.scheduled``); ``closed_loop`` also counts its units right
    when it is fed only its own (``speech_closed_right``, for validation)."""
    bb = model.backbone
    emb, frames = _embed(model, batch)
    hidden = bb.hidden_states(emb)  # the LM head only where there are targets, below
    labels = batch.labels

    control = torch.tensor(list(control_ids), device=emb.device)
    d_rows, d_cols = torch.nonzero(batch.decision, as_tuple=True)
    d_logits = bb.lm_head(hidden[d_rows, d_cols])[:, control]  # [D, 3]
    d_target = (labels[d_rows, d_cols][:, None] == control[None]).float().argmax(dim=1)
    d_turn, d_event = batch.turn[d_rows, d_cols], batch.event[d_rows, d_cols]
    d_after = batch.after[d_rows, d_cols]
    d_weight = decision_weights(d_turn, d_event, turn_weight, event_weight, d_after, after_weight)
    decision_loss = _mean_ce(d_logits, d_target, d_weight)
    d_pred = d_logits.argmax(dim=1)
    speak = 1  # index of <|speak|> in control_ids (listen, speak, turn_eos)

    text_mask = (labels != IGNORE) & ~batch.decision
    t_logits, t_target = bb.lm_head(hidden[text_mask]), labels[text_mask]
    t_open = batch.opening[text_mask]
    t_first = (batch.opening & ~F.pad(batch.opening[:, :-1], (1, 0)))[text_mask]
    t_choice, t_arg = batch.choice[text_mask], batch.argument[text_mask]
    t_read, t_copy = batch.reading[text_mask], batch.copied[text_mask]
    text_loss = _weighted_ce(t_logits, t_target, (t_open, reply_weight), (t_choice, call_weight),
                             (t_arg, argument_weight))  # fmt: skip
    t_right = t_logits.argmax(dim=1) == t_target
    values_wrong = _runs_wrong(t_arg, t_right)
    total = text_loss + decision_weight * decision_loss
    speech, closed = None, 0
    if batch.speech is not None:
        cond = hidden if speech_grad else hidden.detach()
        decoder = model.speech_decoder
        rows = scheduled(decoder, cond.detach(), batch.speech, speech_sampling, generator)
        speech = speech_loss(decoder, cond, rows)
        total = total + speech_weight * speech.loss
        if closed_loop:
            closed = closed_loop_right(decoder, cond, batch.speech)
    heard = None
    if listen is not None:
        per_chunk = model.audio_encoder.frames_per_chunk
        heard = heard_loss(listen, frames, batch.heard, batch.chunks, per_chunk,
                           chunk_s=model.cfg.mel_frames_per_chunk / MEL_FRAMES_PER_S)  # fmt: skip
        if heard is not None:
            total = total + ctc_weight * heard.loss
    a_loss: Tensor | None = None
    a_scored: tuple[int, ...] = ()
    a_right: tuple[int, ...] = ()
    if addressee is not None and batch.addressed is not None:
        a_loss, a_scored, a_right = addressee_loss(
            addressee, hidden[d_rows, d_cols], batch.addressed[d_rows, d_cols]
        )
        total = total + addressee_weight * a_loss
    said_speak = d_pred != 0  # speak or turn_eos: the daemon speaks
    acts_right = said_speak == (d_target != 0)  # speaks, or not, as the target does
    return Losses(
        total=total,
        decision=decision_loss.detach(),
        text=text_loss.detach(),
        decisions=len(d_rows),
        decisions_right=int((d_pred == d_target).sum()),
        speak_targets=int((d_target == speak).sum()),
        speak_right=int((said_speak & (d_target == speak)).sum()),
        speak_said=int(said_speak.sum()),
        turns=int(batch.turn.sum()),
        turns_right=int(((d_pred == d_target) & d_turn).sum()),
        events=int(d_event.sum()),
        events_right=int((acts_right & d_event).sum()),
        holds=int((d_event & ~d_turn).sum()),
        holds_right=int((acts_right & d_event & ~d_turn).sum()),
        afters=int(d_after.sum()),
        afters_right=int((acts_right & d_after).sum()),
        text_tokens=len(t_target),
        text_right=int(t_right.sum()),
        opening_tokens=int(t_open.sum()),
        opening_right=int((t_right & t_open).sum()),
        first_tokens=int(t_first.sum()),
        first_right=int((t_right & t_first).sum()),
        choice_tokens=int(t_choice.sum()),
        choice_right=int((t_right & t_choice).sum()),
        argument_tokens=int(t_arg.sum()),
        argument_right=int((t_right & t_arg).sum()),
        argument_values=len(values_wrong),
        argument_values_right=int((values_wrong == 0).sum()),
        reading_tokens=int(t_read.sum()),
        reading_right=int((t_right & t_read).sum()),
        copied_tokens=int(t_copy.sum()),
        copied_right=int((t_right & t_copy).sum()),
        speech=None if speech is None else speech.loss.detach(),
        speech_tokens=0 if speech is None else speech.tokens,
        speech_right=0 if speech is None else speech.right,
        speech_closed_right=closed,
        heard=heard,
        addressee=None if a_loss is None else a_loss.detach(),
        addressed=a_scored,
        addressed_right=a_right,
    )
