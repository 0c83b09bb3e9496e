"""The grid files shipped in suite/grids/ load, and the ones that restate a preset match it."""

import pytest
from conftest import REPO

from suite.grid import load
from suite.presets import apply
from suite.spec import resolve, spec_id

GRIDS = sorted((REPO / "suite/grids").glob("*.toml"))


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: p.stem)
def test_shipped_grid_loads(path):
    grid = load(path)
    assert grid.cells and grid.name == path.stem


def test_grokfast_grid_is_the_preset():
    # The grid spells out `--preset grokfast` (grids cannot name presets): the same specs, so its
    # cells and `suite run --preset grokfast` share run directories.
    grid = load(REPO / "suite/grids/grokfast.toml")
    ids = sorted(cell.id for cell in grid.cells)
    expected = []
    for choices, extra in (
        ({"filter": "grokfast_ema"}, {}),
        ({"filter": "grokfast_ma"}, {}),
        ({}, {"train.eval_every": 100}),
    ):  # the 40k-step baseline evaluates every 10 epochs
        choices, settings = apply("grokfast", choices, extra)
        expected.append(spec_id(resolve(choices, settings, 0)))
    assert ids == sorted(expected)
