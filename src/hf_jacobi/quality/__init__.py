"""The judge of `hf-jacobi quality` and of the demo's sample: is a faster model still the model it was trained from?"""
