"""Jacobi decoding inside serving engines.

`hf_jacobi.integrations.vllm` holds `JacobiProposer`, a vLLM speculative proposer (vLLM's `custom_class` method);
`hf_jacobi.integrations.merged` writes the plain model folder an engine serves (a Jacobi Forcing adapter merged in,
its Jacobi settings kept). Nothing here is imported by `import hf_jacobi`, and vLLM is imported only when used.
"""
