"""The speech decoder's teacher-forced rows are what the daemon feeds it, reply by reply:
checked against the engines' own decoding loop (``speak_loop``) on the same tokens."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from venus.engines.speech import speak_loop
from venus.export.model.backbone import KVCache
from venus.export.model.config import SpeechDecoderConfig
from venus.export.model.speech import SpeechDecoder
from venus.train.layout import IGNORE
from venus.train.speech_batch import (
    COND,
    TOKEN,
    SpeechBatch,
    closed_loop_choices,
    closed_loop_right,
    reply_rows,
    scheduled,
    speech_batch,
    speech_logits,
    speech_loss,
)

START, END = 101, 100
PER_CHUNK = 4


def units(*rows: list[int]) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def test_a_reply_is_one_row_of_conditions_start_and_units() -> None:
    decisions = ["listen", "speak", "speak", "turn_eos", "listen", "speak", "listen"]
    # layout positions 10, 11 spoken in chunk 1; 20 in chunk 2; chunk 3: 30, 31; 50 in 5
    spoken = [-1] * 60
    for pos, chunk in ((10, 1), (11, 1), (20, 2), (30, 3), (31, 3), (50, 5)):
        spoken[pos] = chunk
    codes = units([9] * 4, [1, 2, 3, 4], [5, 6, 0, 7], [8, 9, 0, 0], [0] * 4, [3, 3, 3, 3],
                  [9] * 4)  # fmt: skip
    first, second = reply_rows(decisions, spoken, codes, START, END)
    assert first.kind == [COND, COND, *[TOKEN] * 4, COND, *[TOKEN] * 4, COND, COND,
                          *[TOKEN] * 3]  # fmt: skip
    assert first.source == [10, 11, START, 1, 2, 3, 20, START, 5, 6, 0, 30, 31, START, 8, 9]
    # full chunks: the last unit is never fed; the reply's end: silence cut, then end
    assert first.labels == [IGNORE, IGNORE, 1, 2, 3, 4, IGNORE, 5, 6, 0, 7, IGNORE, IGNORE,
                            8, 9, END]  # fmt: skip
    # cut by listen: no end
    assert second.source == [50, START, 3, 3, 3] and second.labels == [IGNORE, 3, 3, 3, 3]


def test_a_replys_last_chunk_takes_the_end_of_its_last_word_from_the_next_second() -> None:
    """The chunk that ends a reply has half a chunk more (``final_chunk_tokens``: 6 of 4
    here): the first codes of the next, listening, chunk's second; silence is cut."""
    spoken = [-1, 0, 1, -1]
    run_on = units([1, 2, 3, 4], [5, 6, 7, 8], [9, 0, 0, 0])
    [row] = reply_rows(["speak", "turn_eos", "listen"], spoken, run_on, START, END)
    assert row.labels[-6:] == [5, 6, 7, 8, 9, END]
    full = units([1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 0])
    [row] = reply_rows(["speak", "turn_eos", "listen"], spoken, full, START, END)
    assert row.labels[-6:] == [5, 6, 7, 8, 9, 9]  # the budget is full: no end
    assert row.source[-6:] == [START, 5, 6, 7, 8, 9]  # the last code is never fed
    # a chunk that speaks again next (another reply) lends nothing; nor does the set's end
    rows = reply_rows(["speak", "turn_eos", "speak"], [-1, 0, 1, 2], run_on, START, END)
    assert rows[0].labels[-5:] == [5, 6, 7, 8, END]
    [row] = reply_rows(["speak", "turn_eos"], spoken[:3], run_on[:2], START, END)
    assert row.labels[-5:] == [5, 6, 7, 8, END]


def test_a_chunk_without_spoken_text_adds_nothing_and_a_silent_end_is_start_end() -> None:
    decisions = ["speak", "speak", "turn_eos"]
    spoken = [-1, 0, -1, -1, 2]  # chunk 1 only delegates
    [row] = reply_rows(decisions, spoken, units([1, 2, 3, 4], [5] * 4, [0] * 4), START, END)
    assert row.source == [1, START, 1, 2, 3, 4, START]
    assert row.labels == [IGNORE, 1, 2, 3, 4, IGNORE, END]


def test_the_rows_give_the_logits_the_daemon_decodes_with() -> None:
    """Teacher-forced logits over a row equal the streaming decoder's at each step, when
    the stream is fed the row's units (so the row's layout is the runtime one)."""
    torch.manual_seed(0)
    cfg = SpeechDecoderConfig(codebook=100, hidden_size=32, layers=2, heads=4, kv_heads=2,
                              head_dim=8, intermediate_size=64)  # fmt: skip
    decoder = SpeechDecoder(cfg, cond_dim=16).eval()
    hidden = torch.randn(1, 40, 16)
    decisions = ["speak", "turn_eos"]
    spoken = [-1] * 40
    for pos, chunk in ((3, 0), (4, 0), (9, 1)):
        spoken[pos] = chunk
    codes = units([7, 8, 9, 10], [11, 12, 0, 0])
    rows = reply_rows(decisions, spoken, codes, cfg.start_token, cfg.end_token)
    batch = speech_batch([rows])
    assert batch is not None
    with torch.no_grad():
        loss = speech_loss(decoder, hidden, batch)
        every = speech_logits(decoder, hidden, batch)  # the logits at every position
    assert loss.tokens == 4 + 3  # 4 units, then 2 units and end
    target = batch.labels != IGNORE
    assert float(loss.loss) == pytest.approx(
        float(F.cross_entropy(every[target], batch.labels[target])), rel=1e-5
    )

    # The streaming path: per chunk, condition + start, then the units, fed as the loop does.
    cache = decoder.new_cache(1)
    seen: list[np.ndarray] = []
    for k, pos in ((0, [3, 4]), (1, [9])):
        want = [int(c) for c in codes[k]]
        if k == 1:
            want = [11, 12]
        queue = iter([*want, cfg.end_token])

        def choose(_scores: np.ndarray, queue: Iterator[int] = queue) -> int:
            return next(queue)

        def forward(cond: np.ndarray, ids: np.ndarray) -> np.ndarray:
            x = torch.cat((torch.from_numpy(cond), decoder.embed(torch.from_numpy(ids))), 1)
            logits, _ = decoder.step(x, cache)
            seen.append(logits[0, -1].numpy())
            return logits.numpy()

        cond = decoder.condition(hidden[:, pos]).detach().numpy()
        with torch.no_grad():
            speak_loop(forward, cond, cfg.start_token, cfg.end_token,
                       choose, PER_CHUNK)  # fmt: skip
    with torch.no_grad():
        logits = speech_logits(decoder, hidden, batch)
    at = torch.nonzero(batch.labels[0] != IGNORE).flatten()
    assert len(at) == len(seen)
    np.testing.assert_allclose(logits[0, at].numpy(), np.stack(seen), atol=1e-4)


def _decoder_and_rows(seed: int = 0) -> tuple[SpeechDecoder, torch.Tensor, SpeechBatch]:
    """A random decoder, backbone states and a two-reply batch: a whole reply of three
    chunks (the last ending early) and a reply cut by listen."""
    torch.manual_seed(seed)
    cfg = SpeechDecoderConfig(codebook=12, hidden_size=32, layers=2, heads=4, kv_heads=2,
                              head_dim=8, intermediate_size=64)  # fmt: skip
    decoder = SpeechDecoder(cfg, cond_dim=16).eval()
    hidden = torch.randn(1, 40, 16)
    decisions = ["speak", "speak", "turn_eos", "listen", "speak", "listen"]
    spoken = [-1] * 40
    for pos, chunk in ((3, 0), (4, 0), (9, 1), (15, 2), (30, 4)):
        spoken[pos] = chunk
    codes = units([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 0, 0], [0] * 4, [11, 1, 2, 3], [0] * 4)
    rows = reply_rows(decisions, spoken, codes, cfg.start_token, cfg.end_token)
    batch = speech_batch([rows])
    assert batch is not None and len(rows) == 2
    return decoder, hidden, batch


def test_closed_loop_choices_are_what_the_daemons_loop_chooses_fed_its_own_units() -> None:
    """Row by row and chunk by chunk, the engines' decoding loop (``speak_loop``) with a
    greedy choice makes the same choices; where it chose ``end`` before the data did, the
    data's unit goes on (the rule of ``closed_loop_choices``)."""
    decoder, hidden, batch = _decoder_and_rows()
    cfg = decoder.cfg
    choices = closed_loop_choices(decoder, hidden, batch)
    for r in range(batch.kind.shape[0]):
        kind, source, labels = (t[r].tolist() for t in (batch.kind, batch.source, batch.labels))
        cache = decoder.new_cache(1)
        want: list[int] = []
        t = 0
        while t < len(kind) and kind[t]:
            conds = []
            while kind[t] == COND:
                conds.append(source[t])
                t += 1
            targets = []
            while t < len(kind) and kind[t] == TOKEN:
                targets.append(labels[t])
                t += 1
            picked = iter(targets)

            def choose(
                scores: np.ndarray, picked: Iterator[int] = picked, want: list[int] = want
            ) -> int:
                mine = int(np.argmax(np.where(np.arange(len(scores)) == cfg.start_token,
                                              -np.inf, scores)))  # fmt: skip
                want.append(mine)
                data = next(picked, cfg.end_token)
                return data if mine == cfg.end_token and data != cfg.end_token else mine

            def forward(cond: np.ndarray, ids: np.ndarray, cache: KVCache = cache) -> np.ndarray:
                x = torch.cat((torch.from_numpy(cond), decoder.embed(torch.from_numpy(ids))), 1)
                logits, _ = decoder.step(x, cache)
                return logits.numpy()

            with torch.no_grad():
                cond = decoder.condition(hidden[:, conds]).numpy()
                speak_loop(forward, cond, cfg.start_token, cfg.end_token, choose, len(targets))
        mine = [c for c, label in zip(choices[r].tolist(), labels, strict=True) if label != IGNORE]
        assert mine[: len(want)] == want
    right = int(((choices == batch.labels) & (batch.labels != IGNORE)).sum())
    assert closed_loop_right(decoder, hidden, batch) == right


def test_a_decoder_that_learnt_the_rows_scores_the_same_closed_loop() -> None:
    """Fed its own choices, a decoder that has learnt the rows by heart still gets every
    target right (the closed loop loses nothing that teacher forcing has)."""
    decoder, hidden, batch = _decoder_and_rows()
    optim = torch.optim.Adam(decoder.parameters(), lr=1e-2)
    decoder.train()
    for _ in range(200):
        optim.zero_grad()
        speech_loss(decoder, hidden, batch).loss.backward()  # type: ignore[no-untyped-call]
        optim.step()
    decoder.eval()
    with torch.no_grad():
        forced = speech_loss(decoder, hidden, batch)
    assert forced.right == forced.tokens  # learnt by heart
    assert closed_loop_right(decoder, hidden, batch) == forced.tokens


def test_scheduled_sampling_feeds_the_decoders_own_previous_choice() -> None:
    decoder, hidden, batch = _decoder_and_rows()
    cfg = decoder.cfg
    assert scheduled(decoder, hidden, batch, 0.0) is batch
    every = scheduled(decoder, hidden, batch, 1.0, torch.Generator().manual_seed(1))
    with torch.no_grad():
        own = speech_logits(decoder, hidden, batch)
    own[..., cfg.start_token] = float("-inf")
    before = own.argmax(-1)
    fed_unit = (batch.kind == TOKEN) & (batch.source != cfg.start_token)
    for r, t in zip(*torch.nonzero(batch.kind != 0, as_tuple=True), strict=True):
        got, was = int(every.source[r, t]), int(batch.source[r, t])
        if fed_unit[r, t] and int(before[r, t - 1]) != cfg.end_token:
            assert got == int(before[r, t - 1])
        else:
            assert got == was  # conditions, start and an end choice are left
    assert torch.equal(every.labels, batch.labels) and torch.equal(every.kind, batch.kind)
    assert bool((every.source != batch.source).any())  # a random decoder errs somewhere
    # a share draws a subset, the same for the same seed
    half = [scheduled(decoder, hidden, batch, 0.5, torch.Generator().manual_seed(s)).source
            for s in (3, 3, 4)]  # fmt: skip
    assert torch.equal(half[0], half[1])
    changed = half[0] != batch.source
    assert bool((changed <= (every.source != batch.source)).all())
    assert 0 < int(changed.sum()) < int((every.source != batch.source).sum())
    assert not torch.equal(half[0], half[2])
