"""The shipped bench/model_costs.json must equal model_info of the code as it is now."""

from __future__ import annotations

import pytest

from venus.bench.estimate import shipped_costs

pytest.importorskip("torch")

from venus.export.info import model_info
from venus.export.model.config import PRESETS

STALE = "bench/model_costs.json is stale for {}: run scripts/update-model-costs"


def test_shipped_costs_cover_every_preset() -> None:
    assert sorted(shipped_costs()) == sorted(PRESETS), STALE.format("the preset list")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_shipped_costs_equal_model_info(name: str) -> None:
    shipped = shipped_costs().get(name)
    assert shipped == model_info(PRESETS[name]()), STALE.format(name)
