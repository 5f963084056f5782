"""The training layout follows the daemon's per-chunk context rules (daemon/frontend/step.py),
checked on hand-built chunks with known token sequences."""

from __future__ import annotations

from typing import Any

import pytest

from venus.export.model.config import PRESETS
from venus.train.layout import AUDIO, IGNORE, TOKEN, VISION, build_layout

S = PRESETS["tiny"]().special_token_ids
NAMES = {i: n for n, i in S.items()}
WORDS = {"hi": 1, " there": 2, "bye": 3, " bye": 3, " now": 4, "{}": 5, "ok": 6, "R": 7}


def encode(text: str) -> list[int]:
    """A toy tokenizer: known words one token each, else one token a character (+100)."""
    if text in WORDS:
        return [WORDS[text]]
    return [100 + ord(c) % 50 for c in text]


def chunk(decision: str = "listen", text: str = "", delegate: tuple[str, ...] = (),
          results: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    return {
        "decision": decision,
        "text": text,
        "delegate": list(delegate),
        "results": list(results),
    }


def render(layout) -> list[str]:
    out = []
    for token, kind, slot in zip(layout.ids, layout.kind, layout.slot, strict=True):
        if kind == AUDIO:
            out.append(f"A{slot}")
        elif kind == VISION:
            out.append(f"V{slot}")
        else:
            out.append(NAMES.get(token, str(token)).strip("<|>"))
    return out


def targets(layout) -> list[tuple[str, str]]:
    shown = render(layout)
    return [(shown[i], NAMES.get(t, str(t)).strip("<|>"))
            for i, t in enumerate(layout.labels) if t != IGNORE]  # fmt: skip


def test_listen_speak_and_turn_end_in_the_daemons_order() -> None:
    chunks = [chunk(), chunk("speak", "hi"), chunk("speak", "there"), chunk("turn_eos", "bye")]
    layout = build_layout(chunks, S, encode, audio_tokens=2, vision_tokens=3)
    assert render(layout) == [
        "chunk_start", "audio_start", "A0", "A1", "audio_end",
        "listen", "chunk_end", "chunk_start", "audio_start", "A2", "A3", "audio_end",
        "speak", "1",
        "chunk_end", "chunk_start", "audio_start", "A4", "A5", "audio_end",
        "speak", "2",  # " there": the reply continues with a space
        "chunk_end", "chunk_start", "audio_start", "A6", "A7", "audio_end",
        "speak", "3",
    ]  # fmt: skip
    assert targets(layout) == [
        ("audio_end", "listen"),
        ("audio_end", "speak"), ("speak", "1"), ("1", "chunk_end"),
        ("audio_end", "speak"), ("speak", "2"), ("2", "chunk_end"),
        ("audio_end", "speak"), ("speak", "3"), ("3", "turn_eos"),  # turn_eos: speak, then text
    ]  # fmt: skip
    assert sum(layout.decision) == 4
    assert [layout.speech[i] for i, t in enumerate(render(layout)) if t in "123"] == [1, 2, 3]


def test_after_turn_eos_the_next_chunk_opens_with_it_and_a_new_reply_starts_bare() -> None:
    chunks = [chunk("turn_eos", "hi"), chunk("speak", "bye"), chunk("turn_eos", "now")]
    shown = render(build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=1))
    assert shown[shown.index("1") + 1 : shown.index("1") + 4] == [
        "turn_eos", "chunk_end", "chunk_start"]  # fmt: skip
    assert "3" in shown and "4" in shown  # "bye" opens a reply; " now" continues it


def test_results_come_after_the_audio_and_the_decision_reads_the_last_of_them() -> None:
    chunks = [chunk("speak", "ok", results=("R", "R"))]
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=1)
    assert render(layout)[:11] == [
        "chunk_start", "audio_start", "A0", "audio_end",
        "result", "7", "/result", "result", "7", "/result", "speak",
    ]  # fmt: skip
    assert targets(layout)[0] == ("/result", "speak")
    assert layout.labels[5] == IGNORE  # the result's text is read, never a target


def test_delegation_spans_come_first_and_are_supervised_but_not_spoken() -> None:
    chunks = [chunk("turn_eos", "ok", delegate=("{}",))]
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=1)
    assert render(layout)[4:] == ["speak", "delegate", "5", "/delegate", "6"]
    assert targets(layout)[1:] == [("speak", "delegate"), ("delegate", "5"), ("5", "/delegate"),
                                   ("/delegate", "6"), ("6", "turn_eos")]  # fmt: skip
    spoken = [i for i, k in enumerate(layout.speech) if k >= 0]
    assert [render(layout)[i] for i in spoken] == ["6"]
    assert layout.stats.span_tokens == 1 and layout.stats.text_tokens == 1


def test_frames_come_before_the_audio() -> None:
    chunks = [chunk(), chunk()]
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=2,
                          frames=lambda k: {0: 1, 1: None}[k])  # fmt: skip
    assert render(layout)[:7] == ["chunk_start", "image_start", "V2", "V3", "image_end",
                                  "audio_start", "A0"]  # fmt: skip
    assert "image_start" not in render(layout)[7:]
    assert all(k in (TOKEN, AUDIO, VISION) for k in layout.kind)


@pytest.mark.parametrize("decision, closes", [("speak", None), ("turn_eos", None)])
def test_text_over_the_budget_is_cut_and_the_daemon_closes_the_chunk(
    decision: str, closes: None
) -> None:
    """The daemon stops reading at the budget: no target after the last token it reads."""
    chunks = [chunk(decision, "abcdefgh"), chunk()]
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=1, max_text_tokens=4)
    assert layout.stats.truncated_chunks == 1 and layout.stats.text_tokens == 4
    shown = render(layout)
    speak = shown.index("speak")
    assert shown[speak + 5 : speak + 7] == ["chunk_end", "chunk_start"]  # the budget closed it
    assert layout.labels[speak + 4] == IGNORE  # nothing is read after the 4th token


def test_only_the_text_of_a_replys_first_chunk_is_marked_opening() -> None:
    """Opening targets: a reply's first chunk (its delegation span too), after a listen
    or a turn_eos; not the chunks that continue it, not the decisions."""
    chunks = [chunk(), chunk("speak", "hi", delegate=("{}",)), chunk("turn_eos", "bye"),
              chunk("speak", "ok"), chunk(), chunk("turn_eos", "R")]  # fmt: skip
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=0)
    shown = render(layout)
    opening = [(shown[i], NAMES.get(t, str(t)).strip("<|>"))
               for i, t in enumerate(layout.labels) if layout.opening[i]]  # fmt: skip
    assert opening == [
        ("speak", "delegate"), ("delegate", "5"), ("5", "/delegate"), ("/delegate", "1"),
        ("1", "chunk_end"),  # chunk 1 opens the reply; chunk 2 continues it
        ("speak", "6"), ("6", "chunk_end"),  # after turn_eos, a new reply
        ("speak", "7"), ("7", "turn_eos"),  # after a listen
    ]  # fmt: skip
    assert not any(o and d for o, d in zip(layout.opening, layout.decision, strict=True))


def test_the_target_naming_a_calls_capability_is_marked_choice() -> None:
    """With the tokenizer training trains (a BPE of the set's text), the choice target of
    a call span is its capability's first token (the tokens before it, ``{"name": "``,
    are the same in every call), and of a control span its key; nothing else is."""
    from venus.train.tokenizer import train_tokenizer

    calls = ['{"name": "timer", "arguments": {"seconds": 30}}',
             '{"name": "weather", "arguments": {"city": "Oslo"}}',
             '{"retry": "0b36f550"}']  # fmt: skip
    tok = train_tokenizer(calls * 20 + ["Okay, one moment.", "The sky is blue."], 300)

    def bpe(text: str) -> list[int]:
        return list(tok.encode(text).ids)

    chunks = [chunk(), chunk("speak", "Okay, one moment.", (calls[0], calls[2])),
              chunk("turn_eos", "The sky is blue.", (calls[1],))]  # fmt: skip
    layout = build_layout(chunks, S, bpe, audio_tokens=1, vision_tokens=0, max_text_tokens=64)
    picked = [tok.decode([layout.labels[i]]) for i, c in enumerate(layout.choice) if c]
    assert picked == [tok.decode([bpe(c)[k]]) for c, k in ((calls[0], 4), (calls[2], 1),
                                                            (calls[1], 4))]  # fmt: skip
    assert [p[:1] for p in picked] == ["t", "r", "w"]
    # each choice is a target of the span's own tokens, in the chunk that opens the reply
    # or one after it
    assert all(layout.labels[i] != IGNORE for i, c in enumerate(layout.choice) if c)
    assert [layout.opening[i] for i, c in enumerate(layout.choice) if c] == [True, True, False]


def test_the_tokens_of_a_calls_argument_values_are_marked_argument() -> None:
    """With a BPE of the set's text, the argument targets of a call span are the tokens of
    its argument values (those of nested objects too; a string's up to its last letter or
    digit, as the tokenizer joins a final "." with the closing quote), in order; not the
    keys, the capability's name or the punctuation, and nothing of a control span or of a
    span that is not JSON."""
    from venus.train.tokenizer import train_tokenizer

    calls = ['{"name": "timer", "arguments": {"action": "set", "seconds": 15, "label": "tea"}}',
             '{"name": "calculator", "arguments": {"convert": {"value": 12, "from": "km", '
             '"to": "miles"}}}',
             '{"name": "reason", "arguments": {"question": "Explain why the sky is blue."}}',
             '{"retry": "0b36f550"}', '{"name": "timer", "arguments": {"label": "t']  # fmt: skip
    tok = train_tokenizer(calls * 20 + ["Okay, one moment."], 300)

    def bpe(text: str) -> list[int]:
        return list(tok.encode(text).ids)

    assert tok.decode([bpe(calls[2])[-1]]).startswith(".")  # the "." the value ends in
    words = []
    for span in calls:
        layout = build_layout([chunk(), chunk("turn_eos", "Okay, one moment.", (span,))], S, bpe,
                              audio_tokens=1, vision_tokens=0, max_text_tokens=64)  # fmt: skip
        marked = [i for i, a in enumerate(layout.argument) if a]
        assert all(layout.labels[i] != IGNORE and not layout.decision[i] for i in marked)
        words.append(tok.decode([layout.labels[i] for i in marked]).replace(" ", ""))
    assert words == ["set15tea", "12kmmiles", "Explainwhytheskyisblue", "", ""]


def test_the_decision_an_overlap_event_is_decided_in_is_marked_event() -> None:
    """The chunk carrying an event's ``action``: a hold (carrying on through it: event,
    not turn) and a yield (event and turn); the decisions around them are neither."""
    chunks = [chunk(), chunk("speak", "hi"), chunk("speak", "there"), chunk("speak", "bye"),
              chunk(), chunk(), chunk("speak", "ok")]  # fmt: skip
    chunks[2]["action"] = "continue_speaking"
    chunks[4]["action"] = "stop_output"
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=1)
    decisions = [i for i, d in enumerate(layout.decision) if d]
    assert len(decisions) == len(chunks)
    assert [layout.event[i] for i in decisions] == [False, False, True, False, True, False, False]
    assert [layout.turn[i] for i in decisions] == [False, True, False, False, True, False, True]
    assert not any(e and not d for e, d in zip(layout.event, layout.decision, strict=True))
    # the hold at chunk 2 marks chunk 3's carrying on (chunk 4 yields: no mark), the yield
    # at chunk 4 nothing
    assert [layout.after[i] for i in decisions] == [False, False, False, True, False, False, False]


def test_carrying_on_in_the_two_chunks_after_a_hold_is_marked_after() -> None:
    """A long reply with a backchannel decided at chunk 2: chunks 3 and 4 are ``after``,
    chunk 5 is not; a reply the data ends at chunk 3 stops the marks (listening is no
    carrying on), and a new reply is not one."""
    chunks = [chunk(), *(chunk("speak", w) for w in ("a", "b", "c", "d", "e")), chunk()]
    chunks[2]["action"] = "continue_speaking"
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=1)
    decisions = [i for i, d in enumerate(layout.decision) if d]
    assert [layout.after[i] for i in decisions] == [False, False, False, True, True, False, False]
    short = [chunk(), chunk("speak", "a"), chunk("speak", "b"), chunk(), chunk("speak", "c")]
    short[2]["action"] = "continue_speaking"
    layout = build_layout(short, S, encode, audio_tokens=1, vision_tokens=1)
    assert not any(layout.after)


def test_the_spoken_text_of_the_reply_that_delivers_a_result_is_marked_reading() -> None:
    """A result injected while listening is read by the next reply, all of its spoken
    text (not its delegation spans, not the closing token) to its end; one injected
    mid-reply waits for the reply after; a reply owing nothing is not marked."""
    chunks = [chunk("speak", "hi", delegate=("{}",)), chunk("turn_eos", "bye"),
              chunk(results=("R",)), chunk("speak", "ok", delegate=("{}",)),
              chunk("speak", "there"), chunk("turn_eos", "now", results=("R",)),
              chunk("turn_eos", "hi"), chunk("turn_eos", "bye")]  # fmt: skip
    layout = build_layout(chunks, S, encode, audio_tokens=1, vision_tokens=0)
    reading = [NAMES.get(t, str(t)) for t, r in zip(layout.labels, layout.reading, strict=True)
               if r]  # fmt: skip
    assert reading == ["6", "2", "4", "1"]  # ok there now, then hi (the second result)
    copied = [NAMES.get(t, str(t)) for t, c in zip(layout.labels, layout.copied, strict=True)
              if c]  # fmt: skip
    assert copied == []  # "R" says none of them
    said = [chunk(results=("ok",)), chunk("speak", "ok"), chunk("turn_eos", "bye")]
    layout = build_layout(said, S, encode, audio_tokens=1, vision_tokens=0)
    marks = [(NAMES.get(t, str(t)), c) for t, r, c in
             zip(layout.labels, layout.reading, layout.copied, strict=True) if r]  # fmt: skip
    assert marks == [("6", True), ("3", False)]  # "ok" is the result's; "bye" its own word
    assert all(layout.labels[i] != IGNORE for i, r in enumerate(layout.reading) if r)
