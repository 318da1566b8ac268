"""Publishing checkpoints to the Hugging Face Hub."""
