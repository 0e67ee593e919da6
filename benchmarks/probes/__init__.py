"""Probes of settled questions about the inference engine, kept runnable (``benchmarks/RESULTS.md``, "The inference
engine", says what each found)."""
