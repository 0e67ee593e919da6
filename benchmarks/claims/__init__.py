"""The parts of ``benchmarks/paper_claims.py``: jobs, experiment catalogue, runner, statistics, plots."""
