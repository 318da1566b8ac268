"""Training data: prompts for Jacobi Forcing trajectory collection."""
