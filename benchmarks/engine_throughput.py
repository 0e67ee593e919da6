"""Tokens per second of the CTranslate2 engine vs the transformers backend, side by side in one run.

    python benchmarks/engine_throughput.py                          # ~15 min on the shared 2-core CPU
    python benchmarks/engine_throughput.py --demo --gspo-step       # also `make demo`'s commands, before/after

Every measurement runs both engines on the same prompts, interleaved (transformers, then the engine, prompt
by prompt), so that the load of a shared machine falls on both alike: the absolute figures move with the
load, the ratios are what count. Saved to ``benchmarks/results/engine/engine_throughput.json`` with a PNG beside it.

- ``world_model_single`` / ``world_model_batched``: the default world model (``smollm2-135m-wm-patch``, on the
  engine in float32; ``--quantization int8`` for int8) on the dream start states'
  world-model prompts (~1,000 tokens), greedy, one prompt at a time and all at once.
- ``world_model_batched_sampled``: the same batch sampled as dreams sample it (temperature 0.7, seeded): a
  seeded sampling call samples on a spare engine instance loaded in the background (see ``CT2Backend``).
- ``policy_single`` / ``policy_batched``: the policy (``smollm2-135m``) on its first-turn prompts, sampled
  as rollouts are (temperature 0.7, top-p 0.9, seeded).
- ``dream_vector_step``: 8 dreams on the defaults (shipped world model), one step through
  ``DreamWebVectorEnv`` (one batched call) vs the same 8 through ``DreamWebEnv`` one by one, for each
  engine; ``batched_over_one_by_one`` is the time ratio (goal <= 0.35).
- ``policy_weight_sync``: seconds of one ``--use-engine`` weight sync of the policy with a LoRA adapter
  (merge, int8 conversion, engine reload), as the trainer runs it after every optimizer step.
- ``--demo``: ``dynaweb-dream --policy expert`` (``make demo``'s first command) with ``DYNAWEB_ENGINE=transformers``
  vs the default (engine); ``--gspo-step``: one ``dynaweb-train --env dream --expert-frac 0.5`` update with the
  transformers world model, judge and policy rollouts vs the engine for all three (``--use-engine``).

Each section has ``tokens_per_second_ratio`` = engine tokens/s / transformers tokens/s (time ratios for the
commands).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.agent import policy_system_prompt
from dynaweb_env.llm import make_backend
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.llm.ct2_convert import DEFAULT_QUANTIZATION
from dynaweb_env.models import DEFAULT_WORLD_MODEL
from dynaweb_env.world_model import WebWorldModel, WorldModelRequest
from dynaweb_env.world_model.model import DEFAULT_MAX_AXTREE_CHARS, DEFAULT_MAX_NEW_TOKENS

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.env_throughput import TimedBackend, bench_dream, dream_start_states  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "engine" / "engine_throughput.json"
SECTIONS = (
    "world_model_single",
    "world_model_batched",
    "world_model_batched_sampled",
    "policy_single",
    "policy_batched",
)
ENGINES = ("transformers", "ct2")
NOTE = (
    "Both engines run interleaved on the same prompts in one run, so the ratios are fair comparisons; the "
    "absolute figures move with the machine's load (load_average_at_start / _end)."
)


def _time(backend: Any, prompts: list, params: SamplingParams) -> tuple[float, int]:
    start = time.perf_counter()
    generations = backend.generate(prompts, params)
    return time.perf_counter() - start, sum(len(g.completion_ids) for g in generations)


def side_by_side(backends: dict[str, Any], prompts: list, params: SamplingParams, batched: bool) -> dict[str, Any]:
    """Tokens/s of each engine on ``prompts``: all at once, or one at a time interleaved between engines; the ratio is
    the other engine's over ``transformers``'."""
    seconds = dict.fromkeys(backends, 0.0)
    tokens = dict.fromkeys(backends, 0)
    batches = [prompts] if batched else [[prompt] for prompt in prompts]
    for batch in batches:
        for name, backend in backends.items():
            elapsed, count = _time(backend, batch, params)
            seconds[name] += elapsed
            tokens[name] += count
    result: dict[str, Any] = {
        "prompts": len(prompts),
        "batch_size": len(prompts) if batched else 1,
        **{name: {"seconds": round(seconds[name], 2), "tokens": tokens[name],
                  "tokens_per_second": round(tokens[name] / seconds[name], 3)} for name in backends},
    }  # fmt: skip
    engine = next(name for name in backends if name != "transformers")  # the engine measured against the reference
    result["tokens_per_second_ratio"] = round(
        result[engine]["tokens_per_second"] / result["transformers"]["tokens_per_second"], 3
    )
    return result


def engine_backend(name: str, model: str, workers: int, quantization: str | None = None) -> Any:
    """The ``name`` engine's backend for ``model``; the CTranslate2 one with ``workers`` engine workers and
    ``quantization`` weights (default: the engine's, float32)."""
    if name != "ct2":
        return make_backend(f"{name}:{model}")
    options = {"workers": workers} if workers > 1 else {}
    return make_backend(f"ct2:{model}", **options, **({"quantization": quantization} if quantization else {}))


def world_model_prompts(states, actions, world_model: str = DEFAULT_WORLD_MODEL) -> list:
    """The world model's prompts for ``states`` and ``actions``, in the prompt style and output mode it was
    trained for."""
    from dynaweb_env.models import model_prompt_style, world_model_output_mode

    model = WebWorldModel.__new__(WebWorldModel)  # only its prompt building: no backend needed
    model.max_axtree_chars = DEFAULT_MAX_AXTREE_CHARS
    model.output_mode = world_model_output_mode(world_model) or "tree"
    model.prompt_style = model_prompt_style(world_model)
    return [
        model.build_messages(WorldModelRequest(state.goal, state.url, state.axtree, action))
        for state, action in zip(states, actions, strict=True)
    ]


def policy_prompts(tokenizer: Any, states) -> list:
    from dynaweb_trainer.encoding import EpisodeEncoder

    encoder = EpisodeEncoder(tokenizer, policy_system_prompt("compact"), 4000)
    observations = [
        {"goal": s.goal, "url": s.url, "axtree": s.axtree, "last_action": "", "last_action_error": ""} for s in states
    ]
    return [encoder.conversation(observation) for observation in observations]


def dream_step(
    world_model: str,
    states,
    actions,
    save_partial,
    workers: int = 1,
    quantization: str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> dict[str, Any]:
    """8 dreams batched vs one by one, for each engine (the engine first: its ratio is the goal), each pair
    back to back so that the within-engine ratio sees the same load; ``save_partial`` after every run.
    ``max_new_tokens``: the world model's budget for a page."""
    result: dict[str, Any] = {name: {} for name in ENGINES}
    for name in ("ct2", "transformers"):
        backend = TimedBackend(engine_backend(name, world_model, workers, quantization))
        # Untimed warm-up: the first step through a backend pays one-time costs (the engine's first prefill of
        # the system prompt, whose state it then keeps; allocator warm-up), which otherwise fell on whichever
        # mode ran first: measured on the engine, 50 s one by one when first vs 31 s when second.
        bench_dream(backend, states[:2], actions[:2], max_new_tokens, batched=False)
        for key, batched in (("batched", True), ("one_by_one", False)):
            result[name][key] = bench_dream(backend, states, actions, max_new_tokens, batched=batched)
            save_partial(result)
        runs = result[name]
        runs["batched_over_one_by_one"] = round(runs["batched"]["seconds"] / runs["one_by_one"]["seconds"], 3)
        runs["generate_batched_over_one_by_one"] = round(
            runs["batched"]["generate_seconds"] / runs["one_by_one"]["generate_seconds"], 3
        )
    tps = {
        name: {key: result[name][key]["generated_tokens"] / result[name][key]["generate_seconds"]
               for key in ("batched", "one_by_one")} for name in ENGINES
    }  # fmt: skip
    ratios = {key: round(tps["ct2"][key] / tps["transformers"][key], 3) for key in tps["ct2"]}
    result["tokens_per_second_ratio"] = ratios
    result["step_time_ratio_engine_over_transformers"] = {
        key: round(result["ct2"][key]["seconds"] / result["transformers"][key]["seconds"], 3)
        for key in ("batched", "one_by_one")
    }
    return result


def weight_sync_cost(policy: str, repeats: int) -> dict[str, Any]:
    """Seconds of one ``--use-engine`` weight sync (merge the LoRA adapter, convert to int8, reload the engine).

    Runs :class:`~dynaweb_trainer.engine_policy.EngineWeightSync` itself on the policy with the cpu-small
    preset's LoRA adapter, standing in only the few trainer attributes it reads.
    """
    from types import SimpleNamespace

    from peft import LoraConfig, get_peft_model

    from dynaweb_trainer.engine_policy import EngineWeightSync
    from dynaweb_trainer.model_loading import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer(policy, trainable=True)  # as DynaWebTrainer loads its policy
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(unwrap_model=lambda module: module), model=model, processing_class=tokenizer,
        args=SimpleNamespace(temperature=0.7, policy=policy), state=SimpleNamespace(global_step=0),
    )  # fmt: skip
    sync = EngineWeightSync(trainer)
    try:
        for _ in range(repeats):
            sync.sync_weights()
    finally:
        sync.close()
    seconds = [round(value, 2) for value in sync.sync_seconds]
    return {"policy": policy, "lora_r": 8, "quantization": "int8", "seconds": seconds,
            "mean_seconds": round(sum(seconds) / len(seconds), 2)}  # fmt: skip


def timed_command(command: list[str], engine_env: str, timeout: int) -> dict[str, Any]:
    """Wall time of a command run with ``DYNAWEB_ENGINE=engine_env``."""
    env = {**os.environ, "DYNAWEB_ENGINE": engine_env, "TRL_EXPERIMENTAL_SILENCE": "1"}
    start = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    return {"command": f"DYNAWEB_ENGINE={engine_env} {shlex.join(command)}", "seconds": round(seconds, 1)}


def commands_before_after(demo: bool, gspo_step: bool, timeout: int) -> dict[str, Any]:
    """``make demo``'s dream command and one DynaWeb GSPO update, transformers vs engine, interleaved."""
    results: dict[str, Any] = {}
    if demo:
        command = ["dynaweb-dream", "--policy", "expert"]
        before = timed_command(command, "transformers", timeout)
        after = timed_command(command, "ct2", timeout)
        results["demo_dream"] = {"transformers": before, "ct2": after,
                                 "speedup": round(before["seconds"] / after["seconds"], 3)}  # fmt: skip
    if gspo_step:
        with tempfile.TemporaryDirectory(prefix="engine-bench-") as scratch:
            base = ["dynaweb-train", "--env", "dream", "--expert-frac", "0.5", "--max-steps", "1",
                    "--save-strategy", "no", "--disable-tqdm", "true"]  # fmt: skip
            before = timed_command([*base, "--output-dir", f"{scratch}/tf"], "transformers", timeout)
            after = timed_command([*base, "--output-dir", f"{scratch}/ct2", "--use-engine", "true"], "ct2", timeout)
            # The default: world model and judge on the engine, the policy's rollouts in torch (no weight sync).
            frozen = timed_command([*base, "--output-dir", f"{scratch}/ct2-frozen"], "ct2", timeout)
        results["gspo_update"] = {"transformers": before, "ct2": after,
                                  "speedup": round(before["seconds"] / after["seconds"], 3),
                                  "ct2_world_model_and_judge_only": frozen,
                                  "speedup_world_model_and_judge_only": round(before["seconds"] / frozen["seconds"], 3),
                                  }  # fmt: skip
    return results


def generation_sections(args: argparse.Namespace, states, actions, results: dict, save) -> None:
    """World-model and policy tokens/s, single stream and batched, both engines interleaved."""
    greedy = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    backends = {name: engine_backend(name, args.world_model, args.workers, args.quantization) for name in ENGINES}
    prompts = world_model_prompts(states, actions, args.world_model)
    if args.single:
        print("world model, one prompt at a time ...", flush=True)
        results["world_model_single"] = side_by_side(backends, prompts[: args.single], greedy, batched=False)
        save()
    print("world model, batched ...", flush=True)
    results["world_model_batched"] = side_by_side(backends, prompts, greedy, batched=True)
    save()
    print("world model, batched, sampled as in dreams (temperature 0.7, seeded) ...", flush=True)
    sampled = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.7, top_p=0.9, seed=0)
    results["world_model_batched_sampled"] = side_by_side(backends, prompts, sampled, batched=True)
    save()
    if args.skip_policy:
        return
    backends = {name: engine_backend(name, args.policy, args.workers) for name in ENGINES}
    rollout = SamplingParams(max_new_tokens=args.policy_tokens, temperature=0.7, top_p=0.9, seed=0)
    prompts = policy_prompts(backends["transformers"].tokenizer, states)
    if args.single:
        print("policy turns, one at a time ...", flush=True)
        results["policy_single"] = side_by_side(backends, prompts[: args.single], rollout, batched=False)
        save()
    print("policy turns, batched ...", flush=True)
    results["policy_batched"] = side_by_side(backends, prompts, rollout, batched=True)
    save()
    del backends


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", default=DEFAULT_WORLD_MODEL, help="shipped or local world model")
    parser.add_argument(
        "--quantization", help=f"engine weight type of the world model (default: {DEFAULT_QUANTIZATION})"
    )
    parser.add_argument("--policy", default="smollm2-135m", help="policy model")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per measurement")
    parser.add_argument("--single", type=int, default=4, help="of which measured one at a time (0: skip)")
    parser.add_argument("--new-tokens", type=int, default=96, help="new tokens per world-model prompt")
    parser.add_argument("--policy-tokens", type=int, default=64, help="new tokens per policy turn")
    parser.add_argument(
        "--dream-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help="world-model token budget of a dream step"
    )
    parser.add_argument("--workers", type=int, default=1, help="CTranslate2 engine workers (CT2Backend workers)")
    parser.add_argument("--skip-dream", action="store_true", help="skip the 8-dream vector step")
    parser.add_argument("--skip-generate", action="store_true", help="skip the tokens/s sections")
    parser.add_argument("--skip-policy", action="store_true", help="skip the policy tokens/s sections")
    parser.add_argument("--update", action="store_true", help="add to --output's results instead of replacing them")
    parser.add_argument("--demo", action="store_true", help="also time `dynaweb-dream --policy expert`")
    parser.add_argument("--gspo-step", action="store_true", help="also time one dynaweb-train dream update")
    parser.add_argument("--sync", type=int, default=3, help="weight syncs to time (0: none)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per timed command")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/engine_throughput.py", *(argv if argv is not None else sys.argv[1:])])
    results: dict[str, Any] = json.loads(args.output.read_text()) if args.update and args.output.is_file() else {}
    results.update({
        "commands": [*results.get("commands", []), command],
        "note": NOTE,
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
        "engine": f"CTranslate2 (dynaweb_env.llm.ct2_backend.CT2Backend, workers={args.workers}): world model "
        f"{args.quantization or DEFAULT_QUANTIZATION}, policy {DEFAULT_QUANTIZATION}",
        "load_average_at_start": [round(value, 1) for value in os.getloadavg()],
    })  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every section, so a long run interrupted late keeps what it measured
        args.output.write_text(json.dumps(results, indent=2) + "\n")

    states, actions = dream_start_states(args.prompts)
    if not args.skip_generate:
        generation_sections(args, states, actions, results, save)
    if not args.skip_dream:
        print("8 dreams, vector env vs one by one ...", flush=True)

        def save_partial(partial: dict[str, Any]) -> None:
            results["dream_vector_step"] = partial
            save()

        results["dream_vector_step"] = dream_step(
            args.world_model, states[:8], actions[:8], save_partial, args.workers, args.quantization, args.dream_tokens
        )
        save()
    if args.sync:
        print("policy weight sync (--use-engine) ...", flush=True)
        results["policy_weight_sync"] = weight_sync_cost(args.policy, args.sync)
        save()
    results.update(commands_before_after(args.demo, args.gspo_step, args.timeout))
    results["load_average_at_end"] = [round(value, 1) for value in os.getloadavg()]
    save()
    plot(results, args.output.with_suffix(".png"))
    print_summary(results)
    print(f"saved {args.output}")
    return results


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = [key for key in SECTIONS if key in results]
    figure, axis = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for offset, name in ((-width / 2, "transformers"), (width / 2, "ct2")):
        values = [results[key][name]["tokens_per_second"] for key in sections]
        bars = axis.bar([i + offset for i in range(len(sections))], values, width, label=name)
        axis.bar_label(bars, fmt="%.1f", fontsize=7)
    for i, key in enumerate(sections):
        top = max(results[key][name]["tokens_per_second"] for name in ENGINES)
        axis.annotate(f"{results[key]['tokens_per_second_ratio']:.1f}x", (i, top), xytext=(0, 12),
                      textcoords="offset points", ha="center", fontsize=8, weight="bold")  # fmt: skip
    axis.margins(y=0.15)
    axis.set_xticks(range(len(sections)), [key.replace("_", "\n") for key in sections], fontsize=8)
    axis.set_ylabel("generated tokens / s")
    axis.set_title("CTranslate2 int8 vs transformers, same prompts, interleaved (shared 2-core CPU)", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def print_summary(results: dict[str, Any]) -> None:
    print("\nsection                 transformers tok/s   ct2 tok/s   ratio")
    for key in SECTIONS:
        if key in results:
            row = results[key]
            before, after = row["transformers"]["tokens_per_second"], row["ct2"]["tokens_per_second"]
            print(f"  {key:<22}{before:>12.2f}{after:>14.2f}{row['tokens_per_second_ratio']:>8.2f}x")
    if "policy_weight_sync" in results:
        print(f"  policy weight sync: {results['policy_weight_sync']['seconds']} s")
    if "dream_vector_step" in results:
        dream = results["dream_vector_step"]
        for name in ENGINES:
            runs = dream.get(name, {})
            if "batched" not in runs or "one_by_one" not in runs:
                print(f"  8 dreams [{name}]: not finished")
                continue
            print(f"  8 dreams [{name}]: batched {runs['batched']['seconds']:.1f} s, one by one "
                  f"{runs['one_by_one']['seconds']:.1f} s -> {runs['batched_over_one_by_one']:.2f}x")  # fmt: skip
    for key in ("demo_dream", "gspo_update"):
        if key in results:
            row = results[key]
            before, after = row["transformers"]["seconds"], row["ct2"]["seconds"]
            print(f"  {key}: {before} s -> {after} s ({row['speedup']:.2f}x faster)")


if __name__ == "__main__":
    main()
