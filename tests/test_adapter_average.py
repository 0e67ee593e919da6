"""``dynaweb-average-adapters``: the weighted average of LoRA adapters, on the real tiny model and real peft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dynaweb_env import models
from dynaweb_env.ship import ADAPTER_WEIGHTS_FILE, AVERAGE_RECORD_FILE, TRAINING_RECORD_FILE, ship_adapter
from dynaweb_trainer.adapter_average import average_adapters, main


def _tiny():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(models.prepare_model("tiny-random"))


def _random_adapter(directory: Path, rank: int, alpha: int, seed: int, info: dict) -> Path:
    """A tiny-random adapter whose A and B are both random (a fresh adapter's B is zero: no update)."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    get_peft_model(_tiny(), config).save_pretrained(directory)
    models.name_adapter_base(directory, "tiny-random")
    generator = torch.Generator().manual_seed(seed)
    weights = load_file(directory / ADAPTER_WEIGHTS_FILE)
    save_file(
        {k: torch.randn(v.shape, generator=generator) for k, v in weights.items()}, directory / ADAPTER_WEIGHTS_FILE
    )
    (directory / models.WORLD_MODEL_INFO_FILE).write_text(json.dumps(info))
    return directory


def _updates(directory: Path) -> dict[str, torch.Tensor]:
    from peft import PeftModel

    loaded = PeftModel.from_pretrained(_tiny(), directory)
    return {name: module.get_delta_weight("default") for name, module in loaded.named_modules()
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {})}  # fmt: skip


def test_average_is_the_weighted_sum_of_the_updates_and_records_its_sources(tmp_path):
    info = {"output_mode": "patch", "prompt_style": "compact"}
    first = _random_adapter(tmp_path / "a", rank=2, alpha=4, seed=0, info=info)
    second = _random_adapter(tmp_path / "b", rank=3, alpha=3, seed=1, info=info)  # another rank and scaling
    (first / TRAINING_RECORD_FILE).write_text(json.dumps({"steps": 7}))
    out = average_adapters([first, second], tmp_path / "avg", weights=[0.25, 0.75], command="test")

    first_updates, second_updates = _updates(first), _updates(second)
    expected = {name: 0.25 * update + 0.75 * second_updates[name] for name, update in first_updates.items()}
    averaged = _updates(out)
    assert averaged.keys() == expected.keys() and len(averaged) == 4  # 2 layers x q_proj, v_proj
    for name, update in expected.items():
        assert torch.allclose(averaged[name], update, atol=1e-5 * update.abs().max())
    assert models.adapter_base(out) == "tiny-random"  # loads on any machine
    assert models.world_model_output_mode(str(out)) == "patch" and models.model_prompt_style(str(out)) == "compact"
    record = json.loads((out / AVERAGE_RECORD_FILE).read_text())
    assert [s["weight"] for s in record["sources"]] == [0.25, 0.75] and record["command"] == "test"
    assert record["sources"][0]["training"] == {"steps": 7} and record["sources"][1]["training"] is None
    assert all(len(s["weights_sha256"]) == 64 for s in record["sources"])

    # Shipped, it is cut to the shipped rank, and its record replaces the training record of the adapter before.
    target = tmp_path / "package" / "wm"
    target.mkdir(parents=True)
    (target / TRAINING_RECORD_FILE).write_text('{"steps": 512}')
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(models.SHIPPED_ADAPTERS, "test-wm", models.ShippedAdapter("test-wm", str(target), "t", "patch"))
        ship_adapter(out, "test-wm", max_rank=2)
    assert (target / AVERAGE_RECORD_FILE).is_file() and not (target / TRAINING_RECORD_FILE).exists()
    assert json.loads((target / "adapter_config.json").read_text())["r"] == 2


def test_adapters_that_do_not_belong_together_are_refused_and_nothing_is_written(tmp_path):
    first = _random_adapter(tmp_path / "a", 2, 4, 0, {"output_mode": "patch", "prompt_style": "compact"})
    tree = _random_adapter(tmp_path / "t", 2, 4, 1, {"output_mode": "tree", "prompt_style": "compact"})
    out = tmp_path / "avg"
    with pytest.raises(ValueError, match="differ in"):
        average_adapters([first, tree], out)
    with pytest.raises(ValueError, match="at least two"):
        average_adapters([first], out)
    with pytest.raises(ValueError, match="positive"):
        average_adapters([first, first], out, weights=[1.0, -0.5])
    with pytest.raises(ValueError, match="not a LoRA adapter"):
        average_adapters([first, tmp_path], out)
    assert not out.exists()
    with pytest.raises(SystemExit):  # the command line reports the error, not a traceback
        main([str(first), str(tree), "--output-dir", str(out)])
    assert not out.exists()
    main([str(first), str(first), "--output-dir", str(out)])  # an adapter averaged with itself is itself
    for name, update in _updates(first).items():
        assert torch.allclose(_updates(out)[name], update, atol=1e-5 * update.abs().max())
