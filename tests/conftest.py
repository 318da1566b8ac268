"""Shared fixtures. The embedded model is loaded once per test session (its first load converts a GGUF)."""

from __future__ import annotations

import pytest
from hypothesis import settings

from fake_hub import fake_hub  # noqa: F401  (a fixture: pytest finds it here, so tests need no import)

# Property tests check values, never time: on a loaded machine one example of a cheap string property can take over
# hypothesis' default 200 ms deadline and fail the suite with DeadlineExceeded, which says nothing about the code.
settings.register_profile("hf_jacobi", deadline=None)
settings.load_profile("hf_jacobi")


@pytest.fixture(scope="session")
def embedded_model():
    """(model, tokenizer) of the embedded SmolLM2-135M-Instruct, with Jacobi decoding enabled."""
    pytest.importorskip("gguf")
    from hf_jacobi import enable_jacobi, load_default_model

    model, tokenizer = load_default_model()
    return enable_jacobi(model), tokenizer
