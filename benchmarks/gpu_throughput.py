"""GPU throughput: the backend against transformers' own ``model.generate``, dreams batched, training updates.

Commands (the JSON in ``benchmarks/results/gpu/`` comes from them)::

    python benchmarks/gpu_throughput.py                     # on a CUDA machine: every section, its device named
    python benchmarks/gpu_throughput.py --device cpu        # the tiny-random proxy -> results/gpu/cpu_proxy.json
    python benchmarks/gpu_throughput.py --dry-run           # a smoke run: tiny-random, a few tokens

On a machine without registry access, ``benchmarks/gpu/`` stages what it lacks (``benchmarks/gpu/README.md``).

Sections (``--sections``; on CUDA all three, on a CPU ``generation`` only):

- ``generation``: world-model, judge and policy prompts (built from the shipped dream start states, with each
  role's own model), greedy, batched (``--batch`` prompts in one call) and single (one call per prompt), through
  every way of decoding: the backend's own loop (``backend_loop``), the backend through ``model.generate``
  (``backend_generate``; ``backend_generate_compiled`` with a static cache and ``torch.compile``, one graph per
  shape, and ``backend_generate_compiled_dynamic``, one graph for every shape; CUDA only), and
  plain ``model.generate`` on the same left-padded prompts (``plain_generate``, dynamic cache, eager). Each
  reports tokens/s and milliseconds per decoding step (one step = one forward pass of the batch; greedy, so every
  contender decodes the same tokens, which ``same_tokens`` checks). ``default`` names what
  ``decoding_plan`` picks on this device. Each contender runs once untimed first (compilation), then
  ``--repeats`` times; the median is reported. On a CPU with ``tiny-random`` (compute is nothing, overhead
  everything) this is the proxy of issue #54: the backend's per-step overhead against ``model.generate``'s.
- ``dreams``: one step of 8 dreams in a vector env against the same 8 one by one (``env_throughput.bench_dream``).
- ``train``: ``--train-steps`` default ``dynaweb-train --env dream --expert-frac 0.5`` updates and as many
  ``--preset gpu`` updates, each run in a fresh process; ``update_seconds`` (each update, the first compiling on
  CUDA) and ``train_seconds`` from its ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.env_throughput import TimedBackend, bench_dream, dream_start_states  # noqa: E402
from dynaweb_env.agent import initial_conversation  # noqa: E402
from dynaweb_env.llm import make_backend  # noqa: E402
from dynaweb_env.llm.base import SamplingParams  # noqa: E402
from dynaweb_env.llm.call_plan import COMPILE_SHAPES_ENV, compile_shapes  # noqa: E402
from dynaweb_env.llm.transformers_backend import TransformersBackend, decoding_plan  # noqa: E402
from dynaweb_env.models import DEFAULT_WORLD_MODEL, TRAINED_JUDGE  # noqa: E402
from dynaweb_env.world_model.judge import JudgeRequest, JudgeStep, build_judge_messages  # noqa: E402
from dynaweb_env.world_model.prompts import build_world_model_messages  # noqa: E402
from dynaweb_trainer.trainer_policy import POLICY_COMPILE_ENV  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "gpu"
SECTIONS = ("generation", "dreams", "train")
#: The ways of decoding timed side by side (module docstring); the compiled one runs on CUDA only.
CONTENDERS = (
    "backend_loop",
    "backend_generate",
    "backend_generate_compiled",
    "backend_generate_compiled_dynamic",
    "plain_generate",
)
#: The environment variables that set how a training run decodes on CUDA (recorded with each run).
DECODING_ENV = (COMPILE_SHAPES_ENV, POLICY_COMPILE_ENV)
TINY = "tiny-random"
#: The models of each role on a GPU (the shipped world model and judge, the embedded policy).
ROLE_MODELS = {"world_model": DEFAULT_WORLD_MODEL, "judge": TRAINED_JUDGE, "policy": "smollm2-135m"}
#: The training runs of the ``train`` section: extra ``dynaweb-train`` flags of each.
TRAIN_RUNS = {"default": [], "preset_gpu": ["--preset", "gpu"]}
#: Arguments that shrink a ``dynaweb-train`` update to seconds (``--dry-run``).
TINY_TRAIN = [
    "--policy", TINY, "--world-model", TINY, "--judge", TINY, "--num-generations", "2",
    "--per-device-train-batch-size", "2", "--max-turn-tokens", "8", "--agent-max-steps", "2", "--dream-length", "2",
    "--world-model-max-new-tokens", "16", "--judge-max-new-tokens", "16", "--max-axtree-chars", "600",
]  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--sections", default=None, help=f"comma-separated, of {SECTIONS} (default: by device)")
    parser.add_argument("--model", default=None, help="one model for every role (default: tiny-random on a CPU)")
    parser.add_argument("--batch", type=int, default=8, help="prompts per role")
    parser.add_argument("--new-tokens", type=int, default=128, help="greedy tokens per prompt")
    parser.add_argument("--max-axtree-chars", type=int, default=4000)
    parser.add_argument("--single-prompts", type=int, default=None, help="prompts timed one by one (default: all)")
    parser.add_argument("--modes", default="batched,single", help="generation: batched, single or both, in order")
    parser.add_argument("--contenders", default=None, help=f"comma-separated, of {CONTENDERS} (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dream-tokens", type=int, default=384, help="world-model tokens per dream step")
    parser.add_argument("--roles", default=",".join(ROLE_MODELS), help="generation: roles to time, in this order")
    parser.add_argument("--train-runs", default=",".join(TRAIN_RUNS), help="train: comma-separated runs to time")
    parser.add_argument("--train-steps", type=int, default=2, help="updates per training run (the first compiles)")
    parser.add_argument("--dry-run", action="store_true", help="tiny-random, 2 prompts (1 single), 4 tokens, 1 repeat")
    parser.add_argument("--output", type=Path, default=None, help="JSON path (default: results/gpu/<device>.json)")
    args = parser.parse_args(argv)
    args.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    default_sections = SECTIONS if args.device.type == "cuda" else ("generation",)
    args.sections = tuple(args.sections.split(",")) if args.sections else default_sections
    if unknown := set(args.sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    if args.dry_run:
        args.model, args.batch, args.new_tokens, args.repeats, args.dream_tokens = TINY, 2, 4, 1, 8
        args.single_prompts, args.train_steps = 1, 1
    elif args.model is None and args.device.type == "cpu":
        args.model = TINY
    args.contenders = tuple(args.contenders.split(",")) if args.contenders else CONTENDERS
    if set(args.contenders) - set(CONTENDERS) or "plain_generate" not in args.contenders:
        parser.error(f"--contenders {','.join(args.contenders)}: choose from {CONTENDERS}, plain_generate included")
    args.roles, args.train_runs = tuple(args.roles.split(",")), tuple(args.train_runs.split(","))
    args.modes = tuple(args.modes.split(","))
    if not args.modes or set(args.modes) - {"batched", "single"}:
        parser.error(f"--modes {','.join(args.modes)}: choose from batched, single")
    if set(args.roles) - set(ROLE_MODELS) or set(args.train_runs) - set(TRAIN_RUNS):
        parser.error(f"--roles: choose from {tuple(ROLE_MODELS)}; --train-runs: choose from {tuple(TRAIN_RUNS)}")
    args.single_prompts = args.batch if args.single_prompts is None else args.single_prompts
    if min(args.batch, args.new_tokens, args.repeats, args.single_prompts, args.train_steps) < 1:
        parser.error("--batch, --new-tokens, --repeats, --single-prompts and --train-steps must be >= 1")
    return args


def device_name(device: torch.device) -> str:
    """The accelerator's name, or the CPU's with its core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} ({len(os.sched_getaffinity(0))} cores)"


def synchronized(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def role_conversations(count: int, max_axtree_chars: int) -> dict[str, list]:
    """``count`` prompts per role from the shipped dream start states (mixed tasks, as a training batch)."""
    states, actions = dream_start_states(count)
    world_model, judge, policy = [], [], []
    for state, action in zip(states, actions, strict=True):
        previous = state.history[-1] if state.history else ""
        world_model.append(
            build_world_model_messages(state.goal, state.url, state.axtree, action, previous, max_axtree_chars)
        )
        steps = tuple(JudgeStep(a) for a in (*state.history, action))
        judge.append(build_judge_messages(JudgeRequest(state.goal, steps, state.url, state.axtree), max_axtree_chars))
        observation = {"goal": state.goal, "url": state.url, "axtree": state.axtree}
        observation |= {"last_action": "", "last_action_error": ""}
        policy.append(initial_conversation(observation, max_axtree_chars=max_axtree_chars))
    return {"world_model": world_model, "judge": judge, "policy": policy}


def plain_generate(backend: TransformersBackend, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy completions by plain ``model.generate`` (dynamic cache, eager), cut after the first end token."""
    width = max(map(len, prompts))
    input_ids = torch.full((len(prompts), width), backend.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :], attention_mask[row, width - len(ids) :] = torch.tensor(ids), 1
    eos = sorted(backend.eos_token_ids)
    with torch.inference_mode():
        sequences = backend.model.generate(
            input_ids=input_ids.to(backend.device), attention_mask=attention_mask.to(backend.device),
            do_sample=False, max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=backend.pad_token_id,
            disable_compile=True,
        )  # fmt: skip
    completions = []
    for row in sequences[:, width:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in backend.eos_token_ids), len(row))
        completions.append(row[:end])
    return completions


#: A decoding function: token-id prompts and a token budget in, completion ids out.
Run = Callable[[list[list[int]], int], list[list[int]]]


def contenders(backend: TransformersBackend, names: Sequence[str]) -> dict[str, Run]:
    """The ways of decoding ``names`` that run on this device (module docstring), over ``backend``'s model, greedy."""
    ways = {"backend_loop": {"decoding": "loop"}, "backend_generate": {"decoding": "generate", "compile": False}}
    if backend.device.type == "cuda":
        compiled = {"decoding": "generate", "compile": True}
        ways["backend_generate_compiled"] = compiled | {"compile_shapes": "static"}
        ways["backend_generate_compiled_dynamic"] = compiled | {"compile_shapes": "dynamic"}
    runs: dict[str, Run] = {}
    for name, options in ways.items():
        if name not in names:
            continue
        variant = TransformersBackend(
            backend.model, backend.tokenizer, max_batch_size=backend.max_batch_size, **options
        )

        def run(prompts: list[list[int]], new_tokens: int, variant: TransformersBackend = variant) -> list[list[int]]:
            params = SamplingParams(max_new_tokens=new_tokens, temperature=0)
            return [generation.completion_ids for generation in variant.generate_from_ids(prompts, params)]

        runs[name] = run
    runs["plain_generate"] = lambda prompts, new_tokens: plain_generate(backend, prompts, new_tokens)
    return runs


def time_runs(runs: dict[str, Run], calls: list[list[list[int]]], new_tokens: int, args: argparse.Namespace) -> dict:
    """Each of ``runs`` over ``calls`` (each a list of prompts): once untimed (compilation), then ``--repeats`` times,
    the contenders taking turns within each repeat, so that a busy machine slows them alike; median seconds."""
    results: dict[str, dict] = {}
    for name, run in runs.items():
        synchronized(args.device)
        start = time.perf_counter()
        results[name] = {"completions": [run(prompts, new_tokens) for prompts in calls], "all_seconds": []}
        synchronized(args.device)
        results[name]["warmup_seconds"] = time.perf_counter() - start
    for _ in range(args.repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            results[name]["completions"] = [run(prompts, new_tokens) for prompts in calls]
            synchronized(args.device)
            results[name]["all_seconds"].append(time.perf_counter() - start)
    for result in results.values():
        result["seconds"] = statistics.median(result["all_seconds"])
        result["tokens"] = sum(len(ids) for call in result["completions"] for ids in call)
        result["decoding_steps"] = sum(max(map(len, call)) for call in result["completions"])  # forward passes
    return results


def time_contenders(runs: dict[str, Run], calls: list[list[list[int]]], args: argparse.Namespace) -> dict:
    """Tokens/s of each of ``runs`` and its milliseconds per decoding step, prefill left out: the same calls with a
    budget of one token time the prefill (and the first token), which the steps after it do not pay."""
    full = time_runs(runs, calls, args.new_tokens, args)
    prefill = time_runs(runs, calls, 1, args)
    for name, timing in full.items():
        decode_steps = timing["decoding_steps"] - prefill[name]["decoding_steps"]
        timing["tokens_per_s"] = timing["tokens"] / timing["seconds"]
        timing["prefill_seconds"] = prefill[name]["seconds"]
        ms = 1000 * (timing["seconds"] - prefill[name]["seconds"]) / decode_steps if decode_steps else None
        timing["ms_per_step"] = ms
    return full


def default_over_plain(chosen: dict | None, timings: dict) -> dict:
    """The device's default decoding against plain ``model.generate``: ratios of tokens/s and of ms per step."""
    plain = timings["plain_generate"]
    if chosen is None:
        return {}
    steps = chosen["ms_per_step"] / plain["ms_per_step"] if chosen["ms_per_step"] and plain["ms_per_step"] else None
    return {
        "default_over_plain_tokens_per_s": chosen["tokens_per_s"] / plain["tokens_per_s"],
        "default_over_plain_ms_per_step": steps,
    }


def bench_generation(args: argparse.Namespace, results: dict, save: Callable[[], None]) -> None:
    """Fill ``results`` role by role, saving after each."""
    conversations = role_conversations(args.batch, args.max_axtree_chars)
    default, compiled = decoding_plan(args.device)
    default_name = "backend_loop" if default == "loop" else "backend_generate" + ("_compiled" if compiled else "")
    if compiled and compile_shapes() == "dynamic":
        default_name += "_dynamic"
    results.update(default=default_name, roles={})
    for role in args.roles:  # in the order asked: a lease cut short keeps the first
        role_conversations_ = conversations[role]
        reference = args.model or ROLE_MODELS[role]
        backend = make_backend(f"transformers:{reference}", cache=False, device=str(args.device))
        prompts = [backend.chat_prompt_ids(conversation) for conversation in role_conversations_]
        role_result: dict = {"model": reference, "prompt_tokens": [len(ids) for ids in prompts]}
        runs = contenders(backend, args.contenders)
        single = [[ids] for ids in prompts[: args.single_prompts]]
        for mode in args.modes:
            calls = [prompts] if mode == "batched" else single
            timings = time_contenders(runs, calls, args)
            reference_tokens = timings["plain_generate"]["completions"]
            for timing in timings.values():
                timing["same_tokens"] = timing.pop("completions") == reference_tokens
            role_result[mode] = {"contenders": timings} | default_over_plain(timings.get(default_name), timings)
            results["roles"][role] = role_result
            save()  # batched is kept even if single does not finish (compiling batch size 1 can take minutes)
            print(f"{role:12s} {mode:8s} " + "  ".join(
                f"{name} {t['tokens_per_s']:7.1f} tok/s {t['ms_per_step'] or float('nan'):6.2f} ms/step"
                for name, t in timings.items()), flush=True)  # fmt: skip
        del backend, runs


def bench_dreams(args: argparse.Namespace, results: dict, save: Callable[[], None]) -> None:
    reference = args.model or DEFAULT_WORLD_MODEL
    backend = TimedBackend(make_backend(f"transformers:{reference}", cache=False, device=str(args.device)))
    states, actions = dream_start_states(8)
    results.update(world_model=backend.model_name, dream_tokens=args.dream_tokens)
    for name, batched in (("dream_8_batched", True), ("dream_8_sequential", False)):
        bench_dream(backend, states, actions, args.dream_tokens, batched=batched)  # warm-up (compilation)
        results[name] = bench_dream(backend, states, actions, args.dream_tokens, batched=batched)
    results["batched_over_sequential_time"] = (
        results["dream_8_batched"]["seconds"] / results["dream_8_sequential"]["seconds"]
    )
    print(f"8 dreams, one step: batched {results['dream_8_batched']['seconds']:.2f} s, "
          f"one by one {results['dream_8_sequential']['seconds']:.2f} s", flush=True)  # fmt: skip


def train_update(extra: list[str], steps: int, dry_run: bool) -> dict:
    """``steps`` ``dynaweb-train`` updates in a fresh process: wall seconds and its ``summary.json``, with each
    update's seconds (``update_seconds``; the first one pays for compilation on CUDA)."""
    with tempfile.TemporaryDirectory(prefix="gpu-throughput-") as directory:
        argv = ["--env", "dream", "--expert-frac", "0.5", *extra, "--max-steps", str(steps), "--save-steps", "1000",
                "--report-to", "none", "--output-dir", directory, *(TINY_TRAIN if dry_run else [])]  # fmt: skip
        command = [sys.executable, "-c", "import sys; from dynaweb_trainer.cli import train_main; "
                   "sys.exit(train_main(sys.argv[1:]))", *argv]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"dynaweb-train {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        summary = json.loads((Path(directory) / "summary.json").read_text())
    keep = (
        "global_step",
        "train_seconds",
        "update_seconds",
        "policy_tokens_per_s",
        "rollout_seconds",
        "dream_steps",
        "policy_episodes",
        "success_rate_last",
    )
    env = {name: os.environ.get(name) for name in DECODING_ENV}
    return {"argv": " ".join(argv).replace(directory, "<tmp>"), "env": env, "wall_seconds": wall} | {
        k: summary.get(k) for k in keep
    }


def bench_train(args: argparse.Namespace, results: dict, save: Callable[[], None]) -> None:
    """Fill ``results`` run by run, saving after each."""
    for name in args.train_runs:
        results[name] = run = train_update(TRAIN_RUNS[name], args.train_steps, args.dry_run)
        print(f"dynaweb-train {name}: updates {run['update_seconds']} s ({run['wall_seconds']:.1f} s wall)")
        save()


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    import transformers

    device = device_name(args.device)
    results: dict = {
        "command": "python benchmarks/gpu_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": device,
        "device_type": args.device.type,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "config": json.loads(json.dumps(vars(args), default=str)),  # paths and the device as text
    }
    output = args.output
    if output is None:
        slug = "cpu_proxy" if args.device.type == "cpu" else re.sub(r"[^a-z0-9]+", "_", device.lower()).strip("_")
        output = RESULTS / f"{slug}{'_dry_run' if args.dry_run else ''}.json"
    output.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        """Write what has been measured so far (a run cut short by a lease keeps its finished parts)."""
        output.write_text(json.dumps(results, indent=2) + "\n")

    print(f"gpu_throughput on {device}: sections {', '.join(args.sections)}", flush=True)
    for section, bench in (("generation", bench_generation), ("dreams", bench_dreams), ("train", bench_train)):
        if section in args.sections:
            results[section] = {}  # filled as the section goes, so that save() keeps a section cut short
            bench(args, results[section], save)
            save()
    results["complete"] = True
    save()
    print(f"saved {output}")
    return results


if __name__ == "__main__":
    main()
