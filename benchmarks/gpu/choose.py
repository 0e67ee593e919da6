"""Choose how the runs after ``gpu_throughput.py --sections generation`` decode, from what that section measured.

Prints shell ``export`` lines for ``DYNAWEB_COMPILE_SHAPES`` and ``DYNAWEB_POLICY_COMPILE`` (``measure.sh`` evaluates
them), with a comment saying why::

    python benchmarks/gpu/choose.py OUT/generation.json

The rule, fixed before measuring:

- **Shapes**: ``dynamic`` (one compiled graph per model for every batch size and cache length) unless its batched
  world-model call, warm, takes more than :data:`DYNAMIC_SLOWDOWN` times the static graph's; ``static`` then. A
  static graph is compiled anew for each (batch size, cache length), 20-60 s each on an H100, which a training run
  meets many times; a dynamic one once per model.
- **Policy**: compiled when the compiled contender of the chosen shapes (without a world-model measurement, the
  shapes the runs will use) decodes the policy's batch faster, warm, than the uncompiled ``generate``; the compile
  time is not counted (it is paid once per run).

Where the section holds no such measurement, nothing is exported and the code's defaults hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: How much slower, warm, the dynamic graph may decode than the static one and still be chosen.
DYNAMIC_SLOWDOWN = 1.25


def batched(result: dict, role: str) -> dict:
    """The batched contenders of ``role`` in a ``generation`` section's JSON (empty if not measured)."""
    return result.get("generation", {}).get("roles", {}).get(role, {}).get("batched", {}).get("contenders", {})


def choose(result: dict) -> list[str]:
    """The shell lines of the module docstring's rule."""
    from dynaweb_env.llm.call_plan import COMPILE_SHAPES_ENV, compile_shapes
    from dynaweb_trainer.trainer_policy import POLICY_COMPILE_ENV

    lines = []
    world_model = batched(result, "world_model")
    static = world_model.get("backend_generate_compiled", {}).get("seconds")
    dynamic = world_model.get("backend_generate_compiled_dynamic", {}).get("seconds")
    if static or dynamic:
        shapes = "dynamic" if dynamic and (not static or dynamic <= DYNAMIC_SLOWDOWN * static) else "static"
        pairs = (("static", static), ("dynamic", dynamic))
        timed = ", ".join(f"{name} {value:.3f} s" for name, value in pairs if value)
        lines += [f"# world model batched, warm: {timed} -> {shapes}", f"export {COMPILE_SHAPES_ENV}={shapes}"]
    else:  # the world model not measured: the shapes the runs will use
        shapes = compile_shapes()
    policy = batched(result, "policy")
    compiled = policy.get("backend_generate_compiled" + ("_dynamic" if shapes == "dynamic" else ""), {}).get("seconds")
    eager = policy.get("backend_generate", {}).get("seconds")
    if compiled and eager:
        flag = int(compiled < eager)
        lines.append(f"# policy batched, warm: compiled {compiled:.3f} s, uncompiled {eager:.3f} s -> {flag}")
        lines.append(f"export {POLICY_COMPILE_ENV}={flag}")
    return lines or ["# nothing measured to choose from: the code's defaults"]


def main(argv: list[str]) -> None:
    path = Path(argv[0])
    result = json.loads(path.read_text()) if path.exists() else {}
    print("\n".join(choose(result)))


if __name__ == "__main__":
    main(sys.argv[1:])
