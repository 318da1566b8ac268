"""`python -m hf_jacobi.cli ...`, the form `accelerate launch -m hf_jacobi.cli` runs (see recipes/README.md)."""

from . import main

raise SystemExit(main())
