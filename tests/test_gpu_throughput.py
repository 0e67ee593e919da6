"""Smoke tests of ``benchmarks/gpu_throughput.py`` on the CPU: its ``--dry-run`` (tiny-random, a few tokens)."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_benchmark

ROLES = {"world_model", "judge", "policy"}


@pytest.fixture(scope="module")
def gpu_throughput():
    return load_benchmark("gpu_throughput")


def test_dry_run_times_every_way_of_decoding_on_the_same_tokens(gpu_throughput, tmp_path):
    output = tmp_path / "proxy.json"
    results = gpu_throughput.main(["--dry-run", "--device", "cpu", "--output", str(output)])
    assert json.loads(output.read_text()) == results
    assert results["device_type"] == "cpu" and "cores" in results["device"]
    generation = results["generation"]
    assert generation["default"] == "backend_loop"  # decoding_plan's choice on a CPU
    assert set(generation["roles"]) == ROLES
    for role in generation["roles"].values():
        for mode in ("batched", "single"):
            timings = role[mode]["contenders"]
            assert set(timings) == {"backend_loop", "backend_generate", "plain_generate"}
            for timing in timings.values():
                # greedy: every contender decodes the tokens plain model.generate decodes
                assert timing["same_tokens"] and timing["tokens"] >= 1 and timing["tokens_per_s"] > 0
    assert "dreams" not in results and "train" not in results  # a CPU runs the generation proxy only


def test_bad_arguments_fail_before_anything_runs(gpu_throughput):
    with pytest.raises(SystemExit):
        gpu_throughput.parse_args(["--sections", "generation,nope"])
    with pytest.raises(SystemExit):
        gpu_throughput.parse_args(["--batch", "0"])
    with pytest.raises(SystemExit):
        gpu_throughput.parse_args(["--roles", "policy,critic"])
    with pytest.raises(SystemExit):
        gpu_throughput.parse_args(["--train-runs", "paper"])
    args = gpu_throughput.parse_args(["--device", "cpu", "--sections", "dreams"])
    assert args.sections == ("dreams",) and args.model == "tiny-random"


@pytest.mark.slow
def test_dry_run_dreams_and_train_updates(gpu_throughput, tmp_path):
    # What runs only on CUDA by default, run here at the tiny size so it does not first break on a GPU machine.
    results = gpu_throughput.main(
        ["--dry-run", "--device", "cpu", "--sections", "dreams,train", "--output", str(tmp_path / "r.json")]
    )
    dreams = results["dreams"]
    assert dreams["dream_8_batched"]["transitions"] == dreams["dream_8_sequential"]["transitions"] == 8
    for run in results["train"].values():
        assert run["global_step"] == 1 and run["train_seconds"] > 0
        assert len(run["update_seconds"]) == 1 and 0 < run["update_seconds"][0] <= run["train_seconds"]
    assert "--preset gpu" in results["train"]["preset_gpu"]["argv"]
    for run in results["train"].values():  # each update's rollout and its parts, from the run's summary
        parts = run["rollout_seconds"]
        assert len(parts["all"]) == len(parts["policy"]) == len(parts["env"]) == 1
        assert parts["policy"][0] + parts["env"][0] <= parts["all"][0] + 1e-3


def test_choose_follows_its_rule():
    from benchmarks.gpu import choose

    def result(static, dynamic, eager, compiled):
        world_model = {
            "backend_generate_compiled": {"seconds": static},
            "backend_generate_compiled_dynamic": {"seconds": dynamic},
        }
        policy = {"backend_generate": {"seconds": eager}, "backend_generate_compiled_dynamic": {"seconds": compiled}}
        roles = {"world_model": {"batched": {"contenders": world_model}}, "policy": {"batched": {"contenders": policy}}}
        return {"generation": {"roles": roles}}

    lines = choose.choose(result(0.10, 0.12, 1.0, 0.4))
    assert "export DYNAWEB_COMPILE_SHAPES=dynamic" in lines and "export DYNAWEB_POLICY_COMPILE=1" in lines
    lines = choose.choose(result(0.10, 0.13, 1.0, 1.2))
    assert "export DYNAWEB_COMPILE_SHAPES=static" in lines and not any("POLICY" in line for line in lines)
    assert choose.choose({}) == ["# nothing measured to choose from: the code's defaults"]


def test_policy_compile_follows_its_variable(monkeypatch):
    from dynaweb_trainer.trainer_policy import POLICY_COMPILE, POLICY_COMPILE_ENV, policy_compile

    monkeypatch.delenv(POLICY_COMPILE_ENV, raising=False)
    assert policy_compile() is POLICY_COMPILE
    monkeypatch.setenv(POLICY_COMPILE_ENV, "1")
    assert policy_compile() is True
    monkeypatch.setenv(POLICY_COMPILE_ENV, "yes")
    with pytest.raises(ValueError, match="DYNAWEB_POLICY_COMPILE"):
        policy_compile()
