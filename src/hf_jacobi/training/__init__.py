"""Jacobi Forcing post-training: the config, the trainer, its collator (packing, noise schedule, noise-aware mask),
its losses and the recipe steps."""
