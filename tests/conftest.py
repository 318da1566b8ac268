"""Shared fixtures. The embedded model is loaded once per test session (its first load converts a GGUF)."""

from __future__ import annotations

import pytest

from fake_hub import fake_hub  # noqa: F401  (a fixture: pytest finds it here, so tests need no import)


@pytest.fixture(scope="session")
def embedded_model():
    """(model, tokenizer) of the embedded SmolLM2-135M-Instruct, with Jacobi decoding enabled."""
    pytest.importorskip("gguf")
    from hf_jacobi import enable_jacobi, load_default_model

    model, tokenizer = load_default_model()
    return enable_jacobi(model), tokenizer
