"""Jacobi Forcing post-training: the config, the trainer, its collator (packing, noise schedule, noise-aware mask),
its losses and held-out figures (the recipe steps that run them live in cli/: collect, train, evaluate; the study of
finished runs is the project's `lab/study.py`)."""
