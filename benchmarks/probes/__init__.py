"""Probes of settled questions about the inference engine, kept runnable (``docs/lab-notebook.md``, "The inference
engine", says what each found)."""
