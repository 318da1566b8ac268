"""Benchmarks: quality and speed of Jacobi decoding against greedy AR (`runner`, `report`, one module per task under
`tasks`, code execution in `sandbox`), the loop's own overhead (`overhead`), forward costs (`roofline`) and the choice
of settings for the hardware at hand (`tune`). May import decoding, data, loading and the plain results format of hub.results (the table a model card quotes,
rendered in one place); never cli, and hub never imports bench."""
