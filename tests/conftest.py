"""Shared fixtures. The embedded model is loaded once per test session (its first load converts a GGUF)."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

from fake_hub import fake_hub  # noqa: F401  (a fixture: pytest finds it here, so tests need no import)
from test_training import trajectories  # noqa: F401  (a fixture: a tiny model's trajectories, one per module)

# Property tests check values, never time: on a loaded machine one example of a cheap string property can take over
# hypothesis' default 200 ms deadline and fail the suite with DeadlineExceeded, which says nothing about the code.
settings.register_profile("hf_jacobi", deadline=None)
settings.load_profile("hf_jacobi")


SLOW_MARKERS = ("integration", "distributed")
"""Tests that take seconds to minutes each (the embedded model, several processes), against milliseconds for most."""


def _xdist_workers() -> int:
    """How many pytest-xdist workers run the suite (1 without xdist); xdist sets this in every worker's environment."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the slow tests first: xdist hands the first quarter of the tests out in turn, so each
    worker gets half of the slow ones, and the workers then finish together on the fast ones; in file order the last
    minutes of the run were one worker on the embedded model's tests while the other sat idle. Without xdist the
    order is the files' own."""
    if _xdist_workers() > 1:
        items.sort(key=lambda item: not any(item.get_closest_marker(name) for name in SLOW_MARKERS))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs one worker per core), one torch thread per worker and per process a test
    starts: two workers with a thread per core each would oversubscribe the cores, which on a 2-core machine runs
    torch many times slower than one worker alone."""
    if _xdist_workers() > 1:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def torch_threads_stay_one():
    """Under pytest-xdist, a test that leaves its worker on more than one torch thread errors (and the worker is put
    back on one): the worker's later tests would otherwise share the 2 cores with the other worker on 3 threads, which
    ran the embedded model's tests 5-6x slower and the suite past CI's budget (a recipe's `torch.set_num_threads(2)`,
    2026-12-02)."""
    yield
    torch = sys.modules.get("torch")
    if _xdist_workers() > 1 and torch is not None and torch.get_num_threads() != 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        pytest.fail(f"this test left its pytest-xdist worker on {threads} torch threads (1 expected): restore them")


@pytest.fixture(scope="session")
def embedded_model():
    """(model, tokenizer) of the embedded SmolLM2-135M-Instruct, with Jacobi decoding enabled."""
    pytest.importorskip("gguf")
    from hf_jacobi import enable_jacobi, load_default_model

    model, tokenizer = load_default_model()
    return enable_jacobi(model), tokenizer
