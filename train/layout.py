"""One trajectory as the flat token sequence the daemon's backbone sees, with targets.

The daemon builds its context chunk by chunk (``daemon/frontend/step.py``): per chunk
``[pending] <|chunk_start|> (<|image_start|> V.. <|image_end|>) <|audio_start|> A..
<|audio_end|> (<|result|> text <|/result|>)*``, then it decides from the last token's
logits; ``listen`` (or ``turn_eos`` as a decision) is not run but leads the next chunk
(``pending = [decision, <|chunk_end|>]``); ``speak`` is stepped at once and followed by
the chunk's delegation spans (``<|delegate|> JSON <|/delegate|>``, written first, as the
data pipeline does) and text, closed by ``<|chunk_end|>`` or ``<|turn_eos|>`` (not
stepped: pending for the next chunk, ``<|turn_eos|> <|chunk_end|>`` for the latter).
Concatenated over the chunks this is one flat sequence, and a full-sequence forward with
a causal mask equals the daemon's prefill and step calls.

Targets are the positions whose logits the daemon reads: the decision (at the last
prefill token) and every next token of the text phase (from ``<|speak|>`` to the token
before the closing one). A decision that changes course is marked ``turn``: ``speak``
outside a reply (it starts one) or ``listen`` inside one (it yields); the others carry
on what the context already shows. A decision in the chunk where an overlap event is
decided (the chunk's ``action``: an interruption's yield, or carrying on through a
backchannel, an aside or background speech) is marked ``event``; one that carries on
(``event`` without ``turn``) is a hold: the model keeps its course while the user
speaks, where ``turn`` marks the yields. The decisions in the ``AFTER_CHUNKS`` chunks
after a hold that carry on speaking, as the data does, are marked ``after``: the user has
just stopped, and a model that took the overlap for a turn yields there (the shipped
venus-tiny held through 36 of 44 held-out backchannels, and through 29 of them and the
two chunks after, teacher-forced; docs/training-log.md, seventeenth round). The text
targets of the chunk that starts a reply are marked ``opening``: they say which answer
the model took the question for; of those, the target that names a delegation span's
capability (``timer`` in ``{"name": "timer", ..}``, or ``retry`` / ``cancel`` in
``{"retry": ..}``) is also marked ``choice``: the tokens before it are the same in every
span, so it is where a call picks its tool. The tokens of a call's argument values
(``15`` and ``eggs`` in ``"arguments": {"seconds": 15, "label": "eggs"}``) are marked
``argument``: what the model must have heard, where the keys and the punctuation around
them are the same in every call of a tool. The spoken text targets of the reply that
delivers a result (the first to start at or after the chunk it was injected in: the
harness hands a reply every result offered before it starts) are marked ``reading``:
there the model reads the result out; those whose token the result's text has too are
also marked ``copied`` (what it takes from the result, and some of its own words).
Everything else (the user's audio, results, markers) is input only: the assistant's spans
alone are supervised, as in the paper.

A datagen chunk whose ``decision`` is ``turn_eos`` is ``<|speak|> text <|turn_eos|>``:
its decision target is ``<|speak|>`` (docs/data.md). Chunk text continues a reply with a
space (the data pipeline splits a reply's words by chunk).
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AUDIO", "IGNORE", "TOKEN", "VISION", "Layout", "LayoutStats", "build_layout"]

IGNORE = -100  # no target at this position (torch's cross-entropy ignore_index)
TOKEN, AUDIO, VISION = 0, 1, 2  # what fills a position: a token id, an audio or a vision slot
CALL_PREFIX = '{"name": "'  # how every call span starts (datagen's delegation spans)
RESULT_TOKENS = 512  # the daemon's cut of an injected result (step.RESULT_TOKENS)
AFTER_CHUNKS = 2  # chunks after a hold whose carrying on is marked ``after``

Encode = Callable[[str], list[int]]


@dataclass
class LayoutStats:
    chunks: int = 0
    speaking: int = 0
    text_tokens: int = 0
    span_tokens: int = 0
    truncated_chunks: int = 0  # text longer than the daemon's budget, cut to it


@dataclass
class Layout:
    """Parallel per-position lists (``build_layout``)."""

    ids: list[int] = field(default_factory=list)  # token id, or 0 where a slot goes
    kind: list[int] = field(default_factory=list)  # TOKEN, AUDIO or VISION
    slot: list[int] = field(default_factory=list)  # index into the sample's audio / vision tokens
    labels: list[int] = field(default_factory=list)  # target id, or IGNORE
    decision: list[bool] = field(default_factory=list)  # the target is a chunk's decision
    turn: list[bool] = field(default_factory=list)  # a decision that changes course (below)
    event: list[bool] = field(default_factory=list)  # a decision an overlap event is decided in
    after: list[bool] = field(default_factory=list)  # carrying on just after a hold (above)
    opening: list[bool] = field(default_factory=list)  # a text target of a reply's first chunk
    choice: list[bool] = field(default_factory=list)  # a target naming a call's capability
    argument: list[bool] = field(default_factory=list)  # a target of a call's argument value
    reading: list[bool] = field(default_factory=list)  # spoken text of a reply owing a result
    copied: list[bool] = field(default_factory=list)  # of those, a token the result has
    speech: list[int] = field(default_factory=list)  # spoken text position: its chunk, else -1
    stats: LayoutStats = field(default_factory=LayoutStats)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, token: int, kind: int = TOKEN, slot: int = 0) -> int:
        self.ids.append(token if kind == TOKEN else 0)
        self.kind.append(kind)
        self.slot.append(slot)
        self.labels.append(IGNORE)
        self.decision.append(False)
        self.turn.append(False)
        self.event.append(False)
        self.after.append(False)
        self.opening.append(False)
        self.choice.append(False)
        self.argument.append(False)
        self.reading.append(False)
        self.copied.append(False)
        self.speech.append(-1)
        return len(self.ids) - 1


def build_layout(
    chunks: Sequence[Mapping[str, Any]],
    special: Mapping[str, int],
    encode: Encode,
    *,
    audio_tokens: int,
    vision_tokens: int,
    frames: Callable[[int], int | None] = lambda _k: None,
    max_text_tokens: int = 16,
) -> Layout:
    """The flat sequence of ``chunks`` (a trajectory's ``chunks``; module doc).

    ``frames(k)``: the index of the frame chunk ``k`` sees (its vision tokens are
    ``vision_tokens`` slots from ``index * vision_tokens``), or None for none. Audio slots
    of chunk ``k`` are ``k * audio_tokens ...``. Text over ``max_text_tokens`` is cut
    there (the daemon closes the chunk at its budget) and counted in ``stats``.
    """
    s = special
    out = Layout()
    name_prefix = encode(CALL_PREFIX)
    pending: list[int] = []
    in_reply = False
    owed = reads = False  # a result injected and not yet delivered; this reply delivers one
    owed_ids: set[int] = set()  # the tokens of the results owed; then of those it delivers
    read_ids: set[int] = set()
    held = -AFTER_CHUNKS - 1  # the chunk of the last hold
    for k, chunk in enumerate(chunks):
        out.stats.chunks += 1
        last, injected = _prefill(
            out, chunk, k, pending, s, encode, frames(k), audio_tokens, vision_tokens
        )
        owed = owed or bool(chunk["results"])
        owed_ids.update(injected)
        decision = chunk["decision"]
        speaking = decision in ("speak", "turn_eos")
        if _mark_decision(out, last, chunk, s, in_reply, after=k - held <= AFTER_CHUNKS):
            held = k
        opens = speaking and not in_reply
        if opens:  # a reply delivers every result offered before it starts (the harness)
            reads, owed = owed, False
            if reads:
                read_ids, owed_ids = owed_ids, set()
        if not speaking:
            pending = [s["<|listen|>"], s["<|chunk_end|>"]]
            in_reply = reads = False
            continue
        out.stats.speaking += 1
        body, spoken = _body(chunk, s, encode, name_prefix, in_reply, max_text_tokens, out.stats)
        ends_turn = decision == "turn_eos"
        close = s["<|turn_eos|>"] if ends_turn and len(spoken) < max_text_tokens else None
        prev = out.add(s["<|speak|>"])
        for token, is_spoken, is_choice, is_argument in body:
            out.labels[prev], out.opening[prev], out.choice[prev] = token, opens, is_choice
            out.argument[prev] = is_argument
            out.reading[prev] = reads and is_spoken
            out.copied[prev] = out.reading[prev] and token in read_ids
            prev = out.add(token)
            if is_spoken:
                out.speech[prev] = k
        if close is not None:
            out.labels[prev], out.opening[prev] = close, opens
            pending = [close, s["<|chunk_end|>"]]
        else:  # the budget closed the chunk (the daemon stops reading) or <|chunk_end|>
            if len(spoken) < max_text_tokens:
                out.labels[prev], out.opening[prev] = s["<|chunk_end|>"], opens
            pending = [s["<|chunk_end|>"]]
        in_reply = not ends_turn
        reads = reads and in_reply
    return out


def _body(
    chunk: Mapping[str, Any],
    s: Mapping[str, int],
    encode: Encode,
    name_prefix: Sequence[int],
    in_reply: bool,
    max_text_tokens: int,
    stats: LayoutStats,
) -> tuple[list[tuple[int, bool, bool, bool]], list[int]]:
    """A speaking chunk's text phase: its delegation spans, then its text cut to the
    budget, as (token, spoken, choice, argument); and the spoken tokens."""
    body: list[tuple[int, bool, bool, bool]] = []
    for span in chunk["delegate"]:
        ids = encode(span)
        stats.span_tokens += len(ids)
        pick, values = _choice(ids, name_prefix), _argument_values(span, ids, encode)
        body += [(s["<|delegate|>"], False, False, False),
                 *((t, False, i == pick, i in values) for i, t in enumerate(ids)),
                 (s["<|/delegate|>"], False, False, False)]  # fmt: skip
    text = chunk["text"]
    spoken = encode((" " + text) if in_reply and text else text)
    if len(spoken) > max_text_tokens:
        stats.truncated_chunks += 1
        spoken = spoken[:max_text_tokens]
    stats.text_tokens += len(spoken)
    return body + [(t, True, False, False) for t in spoken], spoken


def _mark_decision(
    out: Layout,
    last: int,
    chunk: Mapping[str, Any],
    special: Mapping[str, int],
    in_reply: bool,
    *,
    after: bool,
) -> bool:
    """The decision target at ``last`` and its marks (module doc); whether it is a hold.
    ``after``: the chunk is within ``AFTER_CHUNKS`` after a hold."""
    speaking = chunk["decision"] in ("speak", "turn_eos")
    out.labels[last] = special["<|speak|>"] if speaking else special["<|listen|>"]
    out.decision[last] = True
    out.turn[last] = speaking != in_reply  # starts a reply, or yields in one
    out.event[last] = bool(chunk.get("action"))
    carries_on = speaking and in_reply
    out.after[last] = after and carries_on
    return out.event[last] and carries_on


def _choice(ids: Sequence[int], name_prefix: Sequence[int]) -> int:
    """The index in a span's ``ids`` of the token that names its capability: the first
    that differs from ``{"name": "`` (``CALL_PREFIX``), whose tokens every call shares; a
    control span (``{"retry": ..``) differs at its key."""
    same = 0
    while same < min(len(ids), len(name_prefix)) and ids[same] == name_prefix[same]:
        same += 1
    return same


def _argument_values(span: str, ids: Sequence[int], encode: Encode) -> set[int]:
    """The indices in a span's ``ids`` of its argument values' tokens: each scalar value of
    its ``arguments`` object (and of the objects in it), in order, found as its own tokens
    after the last one found. A string's tokens are its text's (the quote before it is a
    token of its own, with the space) up to its last letter or digit, since the tokenizer
    joins what punctuation ends it with the closing quote (``."}``); a number's or a
    boolean's are those of its JSON text after a space. A span that is not such JSON (a
    model's, in a test) has none."""
    try:
        arguments = json.loads(span).get("arguments")
    except (ValueError, AttributeError):
        return set()
    if not isinstance(arguments, dict):
        return set()
    found: set[int] = set()
    key = encode("arguments")
    at = _find(ids, key, 0)  # values, not the capability's name before them
    at = 0 if at is None else at + len(key)
    for value in _scalars(arguments):
        is_text = isinstance(value, str)
        text = value.rstrip(string.punctuation) if is_text else " " + json.dumps(value)
        want = encode(text) if text else []
        start = _find(ids, want, at) if want else None
        if start is not None:
            found.update(range(start, start + len(want)))
            at = start + len(want)
    return found


def _scalars(value: Any) -> list[Any]:
    """The strings, numbers and booleans in ``value``, nested objects' in order."""
    if isinstance(value, dict):
        return [v for item in value.values() for v in _scalars(item)]
    return [] if value is None or isinstance(value, list) else [value]


def _find(ids: Sequence[int], want: Sequence[int], at: int) -> int | None:
    """Where the first run of ``want`` in ``ids`` from ``at`` starts; None for none."""
    ids, want = list(ids), list(want)
    return next((i for i in range(at, len(ids) - len(want) + 1) if ids[i : i + len(want)] == want),
                None)  # fmt: skip


def _prefill(
    out: Layout,
    chunk: Mapping[str, Any],
    k: int,
    pending: list[int],
    s: Mapping[str, int],
    encode: Encode,
    frame: int | None,
    audio_tokens: int,
    vision_tokens: int,
) -> tuple[int, list[int]]:
    """Chunk ``k``'s prefill (module doc); -> the position of its last token, and the
    tokens of the results it injects."""
    for token in (*pending, s["<|chunk_start|>"]):
        out.add(token)
    if frame is not None:
        out.add(s["<|image_start|>"])
        for j in range(vision_tokens):
            out.add(0, VISION, frame * vision_tokens + j)
        out.add(s["<|image_end|>"])
    out.add(s["<|audio_start|>"])
    for j in range(audio_tokens):
        out.add(0, AUDIO, k * audio_tokens + j)
    last = out.add(s["<|audio_end|>"])
    injected: list[int] = []
    for result in chunk["results"]:
        out.add(s["<|result|>"])
        ids = encode(result)[:RESULT_TOKENS]
        for token in ids:
            out.add(token)
        injected += ids
        last = out.add(s["<|/result|>"])
    return last, injected
