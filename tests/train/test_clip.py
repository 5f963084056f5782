"""``train.clip``: the gradient clipped over every trained parameter together (``all``,
the recipes') or each component apart (``component``), so a large gradient in one part
does not shrink another's."""

from __future__ import annotations

import pytest
import torch

from venus.train.clip import clip_gradients
from venus.train.config import TrainConfigError, parse_train_config


def groups(big: float, small: float) -> dict[str, list[torch.nn.Parameter]]:
    """Two components whose gradients have norms ``big`` and ``small``."""
    out = {}
    for name, norm in (("speech_decoder", big), ("listen", small)):
        p = torch.nn.Parameter(torch.zeros(4))
        p.grad = torch.full((4,), norm / 2.0)  # norm of 4 equal entries: 2 x each
        out[name] = [p]
    return out


def norm(params: list[torch.nn.Parameter]) -> float:
    grad = params[0].grad
    assert grad is not None
    return float(grad.norm())


def test_all_scales_every_component_by_the_largest() -> None:
    g = groups(10.0, 0.1)
    clip_gradients(g, "all")
    total = (10.0**2 + 0.1**2) ** 0.5
    assert norm(g["speech_decoder"]) == pytest.approx(10.0 / total, rel=1e-5)
    assert norm(g["listen"]) == pytest.approx(0.1 / total, rel=1e-5)  # ~0.01: shrunk 10x


def test_component_clips_each_apart() -> None:
    g = groups(10.0, 0.1)
    clip_gradients(g, "component")
    assert norm(g["speech_decoder"]) == pytest.approx(1.0, rel=1e-5)
    assert norm(g["listen"]) == pytest.approx(0.1, rel=1e-5)  # untouched
    with pytest.raises(ValueError, match="'layer'"):
        clip_gradients(g, "layer")


def test_the_recipe_key_is_checked() -> None:
    assert parse_train_config({}).clip == "all"
    assert parse_train_config({"train": {"clip": "component"}}).clip == "component"
    with pytest.raises(TrainConfigError, match=r"train\.clip must be one of all, component"):
        parse_train_config({"train": {"clip": "layer"}}, "r.toml")
    with pytest.raises(TrainConfigError, match=r"train\.clip must be a str"):
        parse_train_config({"train": {"clip": 1}}, "r.toml")
