"""Benchmarks: quality and speed of Jacobi decoding against greedy AR (`runner`, `report`, one module per task under
`tasks`, code execution in `sandbox`), forward costs (`roofline`) and the choice of settings for the hardware at hand
(`tune`). May import decoding, data, loading and the plain results format of `card` (the table a model card
quotes, rendered in one place); never cli or hub."""
