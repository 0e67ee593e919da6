"""Scale-out plumbing that needs no server or second process: served-model specs, the accelerate config,
multi-process CPU set-up, and ``--use-vllm`` without vLLM."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.llm import make_backend, parse_backend_spec
from dynaweb_env.llm.openai_backend import OpenAIBackend
from dynaweb_env.models import WORLD_MODEL_INFO_FILE, model_prompt_style, world_model_output_mode
from dynaweb_env.serving import served_model_spec

URL = "http://127.0.0.1:9/v1"  # nothing listens: building a backend never connects


def test_served_model_options_state_how_the_model_was_trained():
    spec = f"openai:wm@{URL}?timeout=300&prompt_style=compact&output_mode=patch"
    assert parse_backend_spec(spec) == {
        "backend": "openai", "model": "wm", "base_url": URL, "timeout": 300.0,
        "prompt_style": "compact", "output_mode": "patch",
    }  # fmt: skip
    assert (model_prompt_style(spec), world_model_output_mode(spec)) == ("compact", "patch")
    # Unstated: the paper's prompt and no recorded mode (the dream env then reads trees).
    assert (model_prompt_style(f"openai:wm@{URL}"), world_model_output_mode(f"openai:wm@{URL}")) == ("paper", None)
    # A model name that is a shipped adapter or a local checkpoint carries its recorded facts.
    assert world_model_output_mode(f"openai:smollm2-135m-wm-patch@{URL}") == "patch"
    assert world_model_output_mode({"backend": "openai", "model": "m", "base_url": URL, "output_mode": "patch"})
    backend = make_backend(spec, cache=False)  # the facts are not constructor arguments
    assert isinstance(backend, OpenAIBackend) and backend.timeout == 300.0
    backend.close()


@pytest.mark.parametrize(
    "spec",
    [
        f"openai:wm@{URL}?prompt_style=fancy",
        f"openai:wm@{URL}?output_mode=diff",
        f"openai:wm@{URL}?promptstyle=compact",
        {"backend": "openai", "model": "m", "base_url": URL, "prompt_style": "short"},
    ],
)
def test_bad_served_model_options_raise_value_error(spec):
    with pytest.raises(ValueError, match="prompt_style|output_mode|promptstyle"):
        parse_backend_spec(spec)


def test_served_model_spec_reads_the_exported_facts(tmp_path):
    (tmp_path / WORLD_MODEL_INFO_FILE).write_text('{"prompt_style": "compact", "output_mode": "tree"}')
    spec = served_model_spec(tmp_path, URL + "/", timeout=600, retries=1)
    assert spec == f"openai:{tmp_path}@{URL}?timeout=600&retries=1&prompt_style=compact&output_mode=tree"
    judge_spec = served_model_spec("judge", URL, trained_as="smollm2-135m-judge")
    assert judge_spec == f"openai:judge@{URL}?prompt_style=compact"
    plain = served_model_spec("judge", URL, vllm_extensions=False)
    assert "vllm_extensions=0" in plain and make_backend(plain, cache=False).vllm_extensions is False
    with pytest.raises(ValueError, match="flag"):
        parse_backend_spec(f"openai:m@{URL}?vllm_extensions=maybe")


def test_dream_env_prompts_a_served_model_in_its_stated_style():
    world_model = f"openai:wm@{URL}?prompt_style=compact&output_mode=patch"
    env = gym.make("DreamWeb-v0", world_model=world_model, judge=f"openai:judge@{URL}?prompt_style=compact")
    dynamics = env.unwrapped.dynamics
    assert (dynamics.world_model.prompt_style, dynamics.world_model.output_mode) == ("compact", "patch")
    assert dynamics.judge.prompt_style == "compact"
    with pytest.raises(ValueError, match="output_mode"):  # the spec says patch: tree would misread it
        gym.make("DreamWeb-v0", world_model=world_model, output_mode="tree")
    env.close()


def test_shipped_accelerate_config_launches_one_process_per_rank():
    from accelerate.commands.config.config_args import load_config_from_file

    path = Path(__file__).resolve().parents[1] / "dynaweb_trainer" / "accelerate_configs" / "multi-cpu.yaml"
    config = load_config_from_file(str(path))
    assert (config.distributed_type.value, config.num_processes, config.num_machines) == ("MULTI_GPU", 2, 1)


def test_ranks_without_an_accelerator_train_on_the_cpu(monkeypatch):
    import torch

    from dynaweb_trainer.config import _multi_process_without_accelerator

    if torch.accelerator.is_available():  # pragma: no cover - GPU machines
        pytest.skip("an accelerator is present")
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it: GSPOConfig then sets use_cpu (gloo DDP)
    assert _multi_process_without_accelerator()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not _multi_process_without_accelerator()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_use_vllm_without_vllm_fails_clearly_before_loading(tmp_path, capsys):
    import dynaweb_env.llm.vllm_backend  # noqa: F401  (importable without vLLM)
    from dynaweb_trainer.cli import train_main
    from dynaweb_trainer.config import GSPOConfig
    from dynaweb_trainer.trainer import DynaWebTrainer

    assert train_main(["--use-vllm", "--output-dir", str(tmp_path)]) == 2
    assert "dynaweb[vllm]" in capsys.readouterr().err
    with pytest.raises(ImportError, match="CUDA GPU"):
        DynaWebTrainer(GSPOConfig(output_dir=str(tmp_path), use_vllm=True))
    assert not any(tmp_path.iterdir())  # refused before anything was built or written
