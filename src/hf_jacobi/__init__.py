"""hf_jacobi: lossless Jacobi parallel decoding for Hugging Face causal language models."""

from .decoding.config import JacobiConfig
from .decoding.generate import disable_jacobi, enable_jacobi
from .decoding.outputs import JacobiDecoderOnlyOutput
from .models import load_default_model

__version__ = "0.1.0"

__all__ = [
    "JacobiConfig",
    "JacobiDecoderOnlyOutput",
    "__version__",
    "disable_jacobi",
    "enable_jacobi",
    "load_default_model",
]
