"""Jacobi Forcing post-training: the config, the trainer, its collator (packing, noise schedule, noise-aware mask),
its losses, held-out figures and the study of finished runs (the recipe steps that run them live in cli/: collect,
train, evaluate)."""
