"""The speech decoder's teacher-forced rows are what the daemon feeds it, reply by reply:
checked against the engines' own decoding loop (``speak_loop``) on the same tokens."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from venus.engines.speech import speak_loop
from venus.export.model.config import SpeechDecoderConfig
from venus.export.model.speech import SpeechDecoder
from venus.train.layout import IGNORE
from venus.train.speech_batch import (
    COND,
    TOKEN,
    reply_rows,
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
    codes = units([9] * 4, [1, 2, 3, 4], [5, 6, 0, 7], [8, 9, 0, 0], [9] * 4, [3, 3, 3, 3],
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
    assert loss.tokens == 4 + 3  # 4 units, then 2 units and end

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
