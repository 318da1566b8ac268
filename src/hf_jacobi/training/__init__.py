"""Jacobi Forcing post-training: the config, the trainer, its losses and the recipe steps."""
