"""The test harness itself: random inputs are reproducible, so that a failure
can be replayed."""

from __future__ import annotations

import numpy as np

from conftest import SEED_ENV, seed_of


def test_rng_draws_from_a_seed_fixed_by_the_test_id(rng, request, monkeypatch):
    node = request.node.nodeid
    seed = seed_of(node)
    assert ("seed", seed) in request.node.user_properties  # reported with the test
    assert rng.random() == np.random.default_rng(seed).random()
    monkeypatch.delenv(SEED_ENV, raising=False)
    assert seed_of(node) == seed_of(node) != seed_of(node + "[other]")
    monkeypatch.setenv(SEED_ENV, "12345")  # replays a printed seed
    assert seed_of(node) == 12345
