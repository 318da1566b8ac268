"""Answer quality beside speed: the judge of `hf-jacobi quality` and of the demo's sample, in one place."""
