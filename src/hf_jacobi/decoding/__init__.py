"""The Jacobi decoding core: settings, KV bookkeeping, verification, the loop and its generate() integration."""
