"""hf_jacobi: lossless Jacobi parallel decoding and Jacobi Forcing training for Hugging Face causal language models."""

from .data.collection import collect_trajectories, load_trajectories
from .data.packing import JacobiForcingCollator
from .data.prompts import encode_prompts, load_prompts, stdlib_prompts
from .data.trajectories import TrajectoryRecorder
from .decoding.config import JacobiConfig
from .decoding.generate import disable_jacobi, enable_jacobi
from .decoding.outputs import JacobiDecoderOnlyOutput
from .hub.push import publish_checkpoint
from .models import load_default_model
from .training.config import JacobiForcingConfig
from .training.trainer import JacobiForcingTrainer

__version__ = "0.1.0"

__all__ = [
    "JacobiConfig",
    "JacobiDecoderOnlyOutput",
    "JacobiForcingCollator",
    "JacobiForcingConfig",
    "JacobiForcingTrainer",
    "TrajectoryRecorder",
    "__version__",
    "collect_trajectories",
    "disable_jacobi",
    "enable_jacobi",
    "encode_prompts",
    "load_default_model",
    "load_prompts",
    "load_trajectories",
    "publish_checkpoint",
    "stdlib_prompts",
]
