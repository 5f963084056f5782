"""Sampler strategies: properties that hold for any logits (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from venus.engines.sampler import Constraint, Greedy, LogitBias, Sampler, TopP
from venus.errors import EngineError

VOCAB = st.integers(min_value=2, max_value=64)


@st.composite
def logits_rows(draw: st.DrawFn) -> np.ndarray:
    n = draw(VOCAB)
    values = st.floats(min_value=-30, max_value=30, allow_nan=False, width=32)
    return draw(arrays(np.float32, n, elements=values))


@st.composite
def rows_and_ids(draw: st.DrawFn) -> tuple[np.ndarray, frozenset[int]]:
    row = draw(logits_rows())
    ids = draw(st.frozensets(st.integers(0, row.size - 1), min_size=1, max_size=row.size))
    return row, ids


@given(rows_and_ids(), st.integers(0, 2**32 - 1))
def test_constrained_choice_is_always_in_the_set(case: tuple, seed: int) -> None:
    row, allowed = case
    for choose in (Greedy(), TopP(temperature=1.3, top_p=0.95, rng=np.random.default_rng(seed))):
        sampler = Sampler(choose=choose, constraint=Constraint(allowed))
        assert sampler(row) in allowed


@given(logits_rows(), st.floats(0.05, 1.0), st.floats(0.2, 3.0), st.integers(0, 2**32 - 1))
def test_top_p_never_picks_outside_the_nucleus(
    row: np.ndarray, top_p: float, temperature: float, seed: int
) -> None:
    choose = TopP(temperature=temperature, top_p=top_p, rng=np.random.default_rng(seed))
    probs = choose.probabilities(row.astype(np.float64))
    for _ in range(5):
        token = Sampler(choose=choose)(row)
        # In the nucleus: the tokens strictly more probable than it sum to less than top_p.
        assert probs[probs > probs[token]].sum() < top_p + 1e-9
        assert probs[token] > 0


@given(rows_and_ids(), st.floats(-5, 5))
def test_greedy_is_argmax_after_bias(case: tuple, value: float) -> None:
    row, ids = case
    bias = {i: value for i in ids}
    token = Sampler(choose=Greedy(), bias=LogitBias(bias))(row)
    biased = row.astype(np.float64)
    for i, b in bias.items():
        biased[i] += b
    assert biased[token] == biased.max()
    assert token == int(np.argmax(biased))


@settings(max_examples=25)
@given(logits_rows(), st.integers(0, 2**32 - 1))
def test_top_p_is_reproducible_from_the_seed(row: np.ndarray, seed: int) -> None:
    def draws() -> list[int]:
        s = Sampler(choose=TopP(temperature=1.0, top_p=0.9, rng=np.random.default_rng(seed)))
        return [s(row) for _ in range(8)]

    assert draws() == draws()


def test_bias_toward_listen_turns_a_close_decision() -> None:
    listen, speak = 3, 4
    row = np.zeros(8, dtype=np.float32)
    row[speak] = 1.0
    row[listen] = 0.5
    control = Constraint.of([listen, speak, 5])
    assert Sampler(constraint=control)(row) == speak
    assert Sampler(bias=LogitBias({listen: 1.0}), constraint=control)(row) == listen


def test_tiny_top_p_is_greedy() -> None:
    row = np.array([0.0, 3.0, 1.0, 2.9], dtype=np.float32)
    s = Sampler(choose=TopP(temperature=1.0, top_p=1e-6, rng=np.random.default_rng(1)))
    assert {s(row) for _ in range(50)} == {1}


def test_bad_settings_and_inputs_say_what_to_do() -> None:
    with pytest.raises(EngineError, match="temperature"):
        TopP(temperature=0.0)
    with pytest.raises(EngineError, match="top_p"):
        TopP(top_p=1.5)
    with pytest.raises(EngineError, match="outside the vocabulary"):
        Sampler(constraint=Constraint.of([9]))(np.zeros(4, dtype=np.float32))
    with pytest.raises(EngineError, match="one row"):
        Sampler()(np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(EngineError, match="NaN"):
        Sampler()(np.array([0.0, np.nan], dtype=np.float32))
