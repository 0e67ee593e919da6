"""DynaWeb's benchmark scripts, one experiment each, importable as a package.

Run a script from the repository root as a module or as a file; both work::

    python -m benchmarks.env_throughput --skip-real
    python benchmarks/env_throughput.py --skip-real

Each writes its JSON (and plots) into ``benchmarks/results/`` unless given ``--output``. ``paper_claims.py`` drives
the paper's experiments from its parts in ``benchmarks/claims/``; ``benchmarks/probes/`` keeps the scripts of
questions that are settled (their results and conclusions are in ``docs/lab-notebook.md``).
"""
