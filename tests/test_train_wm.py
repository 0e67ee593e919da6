"""Tests of world-model SFT (`dynaweb-train-wm`): example format, loss mask, a real TRL run with resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from dynaweb_env.data.io import write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.envs.dream import resolve_world_model
from dynaweb_env.models import model_prompt_style, world_model_output_mode
from dynaweb_env.world_model import WebWorldModel, WorldModelRequest, format_world_model_target
from dynaweb_env.world_model.judge import build_judge_messages, format_judge_target, parse_judge_output
from dynaweb_env.world_model.judge_cases import judge_cases
from dynaweb_env.world_model.prompts import TERMINAL_MARKER, TREE_HEADER
from dynaweb_env.world_model.state_changes import LABELS_METADATA_KEY
from dynaweb_trainer.world_model_sft import (
    IGNORE_INDEX,
    SUMMARY_FILE,
    WorldModelSFTConfig,
    build_world_model_dataset,
    build_world_model_trainer,
    is_terminal_transition,
    main,
    resolve_checkpoint,
    tokenize_example,
    world_model_example,
)

FORM = "RootWebArea 'Login', focused\n\t[3] textbox 'Username'\n\t[4] button 'Log in'"
TYPED = "RootWebArea 'Login', focused\n\t[3] textbox 'Username' value='bob', focused\n\t[4] button 'Log in'"
WELCOME = "RootWebArea 'Welcome'\n\t[7] heading 'Welcome, bob'\n\t[8] link 'Log out'"


def login_trajectory(name: str, final_action: str = "", split: str = "train") -> Trajectory:
    steps = [
        Step("http://site/login", FORM, "type [3] [bob] [0]", changes="The textbox [3] now reads bob."),
        Step("http://site/login", TYPED, "click [4]"),
        Step("http://site/home", WELCOME, final_action),
    ]
    trajectory = Trajectory(name, "site.login", "Log in as bob.", "expert", steps, True, 1.0, {"split": split})
    trajectory.metadata[LABELS_METADATA_KEY] = {
        "method": "teacher",
        "model": "scripted",
        "transitions": [{"step": 0, "source": "teacher", "reasoning": "Typing fills the box.", "error": ""}],
    }
    return trajectory


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-random"))


class _NoBackend:
    model_name = "none"

    def generate(self, conversations, params):
        raise AssertionError("not called")


def test_example_is_the_world_models_own_prompt_and_target():
    trajectory = login_trajectory("t")
    messages, target = world_model_example(trajectory, 1)
    request = WorldModelRequest("Log in as bob.", "http://site/login", TYPED, "click [4]", "type [3] [bob] [0]")
    assert messages == WebWorldModel(_NoBackend()).build_messages(request)  # one prompt for training and dreams
    assert target.startswith("[Web state changes]\n") and "URL: http://site/home" in target
    assert target.endswith(WELCOME + "\n" + TERMINAL_MARKER)  # empty final action: the env ended the episode
    _, first = world_model_example(trajectory, 0)
    assert first == format_world_model_target(
        "Typing fills the box.\n\nThe textbox [3] now reads bob.", "", TYPED, terminal=False
    )
    _, without = world_model_example(trajectory, 0, include_reasoning=False)
    assert "Typing" not in without
    assert world_model_example(trajectory, 1, label_missing="skip") is None  # step 1 has no label


def test_terminal_only_when_the_environment_ended_the_episode():
    assert is_terminal_transition(login_trajectory("a"), 1)
    assert not is_terminal_transition(login_trajectory("a"), 0)
    assert not is_terminal_transition(login_trajectory("b", final_action="stop [done]"), 1)
    truncated = login_trajectory("c")
    truncated.metadata["truncated"] = True
    assert not is_terminal_transition(truncated, 1)
    for end_reason, terminal in (("truncated", False), ("max_steps", False), ("terminated", True)):
        collected = login_trajectory("d")  # as dynaweb-collect records it
        collected.metadata["end_reason"] = end_reason
        assert is_terminal_transition(collected, 1) == terminal


@pytest.mark.parametrize("loss_on", ["full", "changes"])
def test_loss_mask_covers_only_the_target(tokenizer, loss_on):
    messages, target = world_model_example(login_trajectory("t"), 1)
    row = tokenize_example(tokenizer, messages, target, loss_on=loss_on)
    prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    assert row["input_ids"][: len(prompt_ids)] == prompt_ids  # the model trains on the prompt it will see
    assert set(row["labels"][: len(prompt_ids)]) == {IGNORE_INDEX}
    trained = [token for token in row["labels"] if token != IGNORE_INDEX]
    expected = target + tokenizer.eos_token if loss_on == "full" else target[: target.index(TREE_HEADER)]
    assert tokenizer.decode(trained) == expected
    # The trained tokens are one contiguous span.
    positions = [i for i, token in enumerate(row["labels"]) if token != IGNORE_INDEX]
    assert positions == list(range(positions[0], positions[-1] + 1))


def test_dataset_statistics_truncation_and_drops(tokenizer):
    trajectories = [login_trajectory("a"), login_trajectory("b", final_action="stop [ok]")]
    config = WorldModelSFTConfig(output_dir="/tmp/unused", max_length=None, label_missing="diff")
    data = build_world_model_dataset(tokenizer, trajectories, config)
    assert data.stats["examples"] == 4 and data.stats["terminal"] == 1
    assert data.stats["labelled"] == 2 and data.stats["diff_labelled_on_the_fly"] == 2
    longest = data.stats["max_example_tokens"]
    # A cap between the prompt and the full length cuts targets; a cap inside the prompt drops examples.
    cut = build_world_model_dataset(
        tokenizer, trajectories, WorldModelSFTConfig(output_dir="/tmp/u", max_length=longest - 5)
    )
    assert cut.stats["truncated"] >= 1 and all(len(row["input_ids"]) <= longest - 5 for row in cut.rows)
    # overlong="drop" leaves those examples out whole instead: no target loses its end.
    drop = build_world_model_dataset(
        tokenizer, trajectories, WorldModelSFTConfig(output_dir="/tmp/u", max_length=longest - 5, overlong="drop")
    )
    assert drop.stats["dropped_overlong"] == cut.stats["truncated"] and drop.stats.get("truncated", 0) == 0
    assert len(drop.rows) == len(cut.rows) - cut.stats["truncated"]
    assert all(len(row["input_ids"]) <= longest - 5 for row in drop.rows)
    with pytest.raises(ValueError, match="no usable world_model examples"):
        build_world_model_dataset(tokenizer, trajectories, WorldModelSFTConfig(output_dir="/tmp/u", max_length=50))
    skip = WorldModelSFTConfig(output_dir="/tmp/u", label_missing="skip")
    assert build_world_model_dataset(tokenizer, trajectories, skip).stats["examples"] == 2


def test_judge_targets_parse_back_to_their_verdict():
    for success in (True, False):
        verdict = parse_judge_output(format_judge_target(success))
        assert verdict.error is None and verdict.reward == float(success) and verdict.reasoning


def test_judge_cases_with_every_prefix_of_a_success():
    trajectory = login_trajectory("a")  # two actions, then the final page
    cases = judge_cases([trajectory], every_prefix=True)
    assert [(name, reward, len(request.steps)) for request, reward, name in cases] == [
        ("a", 1.0, 2),
        ("a/cut", 0.0, 1),
        ("a/first0", 0.0, 0),
    ]
    # Each cut ends on the page its first missing action was taken on.
    assert [request.final_axtree for request, _, _ in cases] == [WELCOME, TYPED, FORM]
    assert [step.target for step in cases[0][0].steps] == ["[3] textbox 'Username'", "[4] button 'Log in'"]
    assert len(judge_cases([trajectory])) == 2  # without every_prefix: as recorded and cut before the last action


@pytest.mark.parametrize(("examples", "prompt_style"), [("judge", "compact"), ("judge", "grounded"), ("both", "paper")])
def test_judge_examples_are_the_judges_prompt_and_the_real_verdict(tokenizer, examples, prompt_style):
    trajectories = [login_trajectory("a")]
    config = WorldModelSFTConfig(
        output_dir="/tmp/unused", examples=examples, max_length=None, prompt_style=prompt_style
    )
    data = build_world_model_dataset(tokenizer, trajectories, config)
    assert data.stats["judge_examples"] == 3 and data.stats["judge_successes"] == 1
    assert data.stats["examples"] == 3 + (2 if examples == "both" else 0)
    for row, (request, reward, _) in zip(data.rows, judge_cases(trajectories, every_prefix=True), strict=False):
        prompt = tokenizer.apply_chat_template(
            build_judge_messages(request, prompt_style=prompt_style), add_generation_prompt=True, tokenize=False
        )
        assert tokenizer.decode(row["input_ids"]).startswith(prompt)
        trained = tokenizer.decode([token for token in row["labels"] if token != IGNORE_INDEX])
        assert trained == format_judge_target(reward == 1.0, prompt_style) + tokenizer.eos_token


def test_early_final_cases_take_a_successs_final_action_too_early():
    form = "RootWebArea 'Login', focused\n\t[3] textbox 'Username'\n\t[5] textbox 'Password'\n\t[4] button 'Log in'"
    steps = [
        Step("http://site/login", form, "type [3] [bob] [0]"),
        Step("http://site/login", form.replace("'Username'", "'Username' value='bob'"), "type [5] [pw] [0]"),
        Step("http://site/login", TYPED, "click [4]"),
        Step("http://site/home", WELCOME, ""),
    ]
    success = Trajectory("s", "site.login", "Log in as bob.", "expert", steps, True, 1.0)
    cases = {name: (request, reward) for request, reward, name in judge_cases([success], early_final=True)}
    assert list(cases) == ["s", "s/cut", "s/early0", "s/early1"]
    # Log in clicked at once, on the empty form: the final page is that form, and it is a failure.
    request, reward = cases["s/early0"]
    assert reward == 0.0 and request.final_axtree == form
    assert [(step.action, step.target) for step in request.steps] == [("click [4]", "[4] button 'Log in'")]
    request, _ = cases["s/early1"]  # the username typed, the password skipped
    assert [step.action for step in request.steps] == ["type [3] [bob] [0]", "click [4]"]
    # A final action whose element is not on the earlier page gives no case; failures give none.
    bye = Step("http://site/bye", "RootWebArea 'Bye'", "")
    leave = [*steps[:1], Step("http://site/home", WELCOME, "click [8]"), bye]
    away = Trajectory("w", "site.logout", "Log out.", "expert", leave, True, 1.0)
    assert [name for _, _, name in judge_cases([away], early_final=True)] == ["w", "w/cut"]
    failed = dataclasses.replace(success, id="f", success=False, reward=0.0)
    assert [name for _, _, name in judge_cases([failed], early_final=True)] == ["f"]


def test_judge_early_final_adds_the_near_misses_to_the_training_examples(tokenizer):
    config = WorldModelSFTConfig(
        output_dir="/tmp/unused", examples="judge", max_length=None, judge_prefixes="last", judge_early_final=True
    )
    data = build_world_model_dataset(tokenizer, [login_trajectory("a")], config)
    assert data.stats["judge_examples"] == 3 and data.stats["judge_successes"] == 1  # as recorded, cut, early0


def test_judge_prefixes_last_keeps_only_the_cut_before_the_last_action(tokenizer):
    config = WorldModelSFTConfig(output_dir="/tmp/unused", examples="judge", max_length=None, judge_prefixes="last")
    data = build_world_model_dataset(tokenizer, [login_trajectory("a")], config)
    assert data.stats["judge_examples"] == 2 and data.stats["judge_successes"] == 1
    assert len(data.rows) == 2


def test_config_validation(tmp_path):
    with pytest.raises(ValueError, match="judge_prefixes"):
        WorldModelSFTConfig(output_dir=str(tmp_path), judge_prefixes="some")
    with pytest.raises(ValueError, match="examples"):
        WorldModelSFTConfig(output_dir=str(tmp_path), examples="verdicts")
    with pytest.raises(ValueError, match="overlong"):
        WorldModelSFTConfig(output_dir=str(tmp_path), overlong="shorten")
    with pytest.raises(ValueError, match="loss_on"):
        WorldModelSFTConfig(output_dir=str(tmp_path), loss_on="tree")
    with pytest.raises(ValueError, match="label_missing"):
        WorldModelSFTConfig(output_dir=str(tmp_path), label_missing="teacher")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resolve_checkpoint(WorldModelSFTConfig(output_dir=str(tmp_path), resume_from_checkpoint="last"))
    with pytest.raises(FileNotFoundError, match="trajectory file not found"):
        main(["--output_dir", str(tmp_path), "--dataset_path", str(tmp_path / "missing.jsonl")])


def test_train_saves_a_loadable_adapter_and_resumes(tmp_path):
    from safetensors.torch import load_file

    from dynaweb_env.llm import SamplingParams, make_backend

    data = tmp_path / "transitions.jsonl"
    write_trajectories(data, [login_trajectory(f"t{i}") for i in range(3)] + [login_trajectory("v", split="val")])
    out = tmp_path / "wm"
    common = ["--model_name_or_path", "tiny-random", "--dataset_path", str(data), "--output_dir", str(out)]
    common += ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--save_steps", "1"]
    common += ["--learning_rate", "5e-3"]

    summary = main([*common, "--max_steps", "2"])
    assert summary["steps"] == 2 and summary["data"]["examples"] == 6  # the val trajectory is left out
    assert summary["first_loss"] is not None and summary["last_loss"] is not None
    assert json.loads((out / SUMMARY_FILE).read_text())["steps"] == 2
    assert (out / "adapter_config.json").is_file() and (out / "checkpoint-2").is_dir()
    weights = load_file(out / "adapter_model.safetensors")
    assert sum(tensor.numel() for tensor in weights.values()) == summary["trainable_parameters"]
    # LoRA's B matrices start at zero: non-zero ones prove the optimiser changed the adapter.
    assert any(float(t.abs().sum()) > 0 for name, t in weights.items() if "lora_B" in name)
    assert (out / "adapter_model.safetensors").stat().st_size < 1_000_000  # a small adapter, not a model

    # The adapter names its base by embedded name (portable), and loads merged into the base's weights.
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny-random"
    # The directory records its output mode: dream envs and dynaweb-eval-wm read it in that mode.
    assert world_model_output_mode(str(out)) == "tree"
    assert resolve_world_model(str(out), None) == (str(out), "tree")
    with pytest.raises(ValueError, match="writes output_mode='tree'"):
        resolve_world_model(str(out), "patch")
    backend = make_backend(str(out), cache=False)
    base = make_backend("tiny-random", cache=False)
    assert not hasattr(backend.model, "peft_config")
    changed = [
        name
        for name, weight in backend.model.state_dict().items()
        if not torch.equal(weight, base.model.state_dict()[name])
    ]
    assert changed and all("proj" in name for name in changed)  # LoRA targets the linear layers only
    params = SamplingParams(max_new_tokens=3, temperature=0.0)
    (generation,) = backend.generate([[{"role": "user", "content": "hi"}]], params)
    assert len(generation.completion_ids) >= 1

    resumed = main([*common, "--max_steps", "3", "--resume_from_checkpoint", "last"])
    assert resumed["steps"] == 3 and Path(resumed["resumed_from"]).name == "checkpoint-2"


def test_time_budget_stops_with_a_saved_adapter(tmp_path):
    data = tmp_path / "transitions.jsonl"
    write_trajectories(data, [login_trajectory(f"t{i}") for i in range(3)])
    out = tmp_path / "wm"
    summary = main(
        ["--model_name_or_path", "tiny-random", "--dataset_path", str(data), "--output_dir", str(out)]
        + ["--max_steps", "50", "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1"]
        + ["--save_steps", "100", "--max_train_minutes", "1e-6"]
    )
    # The budget ran out in the first step: stopped there, checkpointed, adapter and summary written.
    assert summary["steps"] == 1 and summary["max_train_minutes"] == 1e-6
    assert (out / "checkpoint-1" / "trainer_state.json").is_file() and (out / "adapter_model.safetensors").is_file()
    with pytest.raises(ValueError, match="max_train_minutes"):
        WorldModelSFTConfig(output_dir=str(tmp_path), max_train_minutes=-1)


def test_train_a_judge_adapter(tmp_path):
    from dynaweb_env.llm import make_backend
    from dynaweb_env.models import WORLD_MODEL_INFO_FILE
    from dynaweb_env.world_model import TrajectoryJudge

    data = tmp_path / "trajectories.jsonl"
    write_trajectories(data, [login_trajectory(f"t{i}") for i in range(2)])
    out = tmp_path / "judge"
    summary = main(
        ["--model_name_or_path", "tiny-random", "--dataset_path", str(data), "--output_dir", str(out)]
        + ["--examples", "judge", "--max_steps", "1", "--per_device_train_batch_size", "2"]
    )
    assert summary["examples"] == "judge" and summary["data"]["judge_examples"] == summary["data"]["examples"] == 6
    assert json.loads((out / WORLD_MODEL_INFO_FILE).read_text())["examples"] == "judge"
    # Trained on compact prompts (the default) and recorded so: the dream env prompts it the same way.
    assert summary["prompt_style"] == "compact" and model_prompt_style(out) == "compact"
    request = judge_cases([login_trajectory("x")])[0][0]
    (verdict,) = TrajectoryJudge(make_backend(str(out), cache=False), prompt_style="compact").judge([request])
    assert verdict.raw  # the adapter loads and answers as a judge (a 1-step tiny model's verdict means nothing)


@pytest.mark.parametrize("bf16", [None, False])
def test_bf16_autocast_on_a_cpu_with_bf16_instructions(tmp_path, bf16):
    """Unset, bf16 follows the hardware (a CPU with bf16 instructions: autocast); --bf16 false keeps fp32."""
    from dynaweb_trainer.sft_base import cpu_supports_bf16

    if torch.cuda.is_available():
        pytest.skip("the CPU path")
    config = WorldModelSFTConfig(output_dir=str(tmp_path), model_name_or_path="tiny-random", bf16=bf16)
    expected = cpu_supports_bf16() if bf16 is None else False
    assert config.bf16 is expected and config.use_cpu is expected
    trainer, _ = build_world_model_trainer(config, [login_trajectory("a")])
    layer = next(m for name, m in trainer.model.named_modules() if name.endswith("q_proj.base_layer"))
    dtypes = set()
    layer.register_forward_hook(lambda module, inputs, output: dtypes.add(output.dtype))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.training_step(trainer.model, next(iter(trainer.get_train_dataloader())))
    # The labelled-head loss calls the backbone itself, outside accelerate's wrapped forward: autocast must hold.
    assert dtypes == {torch.bfloat16 if expected else torch.float32}
    assert torch.isfinite(loss) and all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_trainer_dataset_keeps_the_mask_after_trl_preparation(tmp_path):
    config = WorldModelSFTConfig(output_dir=str(tmp_path), model_name_or_path="tiny-random", max_steps=1)
    trainer, stats = build_world_model_trainer(config, [login_trajectory("a")])
    tokenizer = trainer.processing_class
    rows = list(trainer.train_dataset)
    assert len(rows) == stats["examples"] == 2
    for row, index in zip(rows, (0, 1), strict=True):
        _, target = world_model_example(login_trajectory("a"), index)
        trained = [token for token in row["labels"] if token != IGNORE_INDEX]
        assert tokenizer.decode(trained) == target + tokenizer.eos_token


def test_default_data_is_the_shipped_train_split(tokenizer):
    from dynaweb_trainer.world_model_sft import load_trajectories

    trajectories = load_trajectories()
    assert trajectories and {t.metadata["split"] for t in trajectories} == {"train"}
    data = build_world_model_dataset(tokenizer, trajectories, WorldModelSFTConfig(output_dir="/tmp/unused"))
    assert data.stats["examples"] == sum(len(t.steps) - 1 for t in trajectories)
    # Every shipped episode was ended by MiniWoB++ itself, so each one's last transition is terminal.
    assert data.stats["terminal"] == len(trajectories)
    assert data.stats.get("truncated", 0) == 0 and data.stats["max_example_tokens"] <= 3072


def test_a_trained_adapter_continues_on_new_data(tmp_path):
    """A LoRA adapter as the model continues its own weights (the judge retrained on dreamed pages)."""
    from safetensors.torch import load_file

    data = tmp_path / "trajectories.jsonl"
    write_trajectories(data, [login_trajectory(f"t{i}") for i in range(2)])
    first, second = tmp_path / "judge", tmp_path / "judge-continued"
    common = ["--dataset_path", str(data), "--examples", "judge", "--per_device_train_batch_size", "2"]
    common += ["--learning_rate", "5e-3", "--max_steps", "1"]
    main(["--model_name_or_path", "tiny-random", "--output_dir", str(first), *common])
    summary = main(["--model_name_or_path", str(first), "--output_dir", str(second), *common])
    before, after = load_file(first / "adapter_model.safetensors"), load_file(second / "adapter_model.safetensors")
    assert before.keys() == after.keys()  # the same LoRA (rank, modules), not a fresh one on merged weights
    assert summary["trainable_parameters"] == sum(t.numel() for t in before.values())
    # Started from the first adapter's trained B matrices (a fresh LoRA starts at zero) and moved on.
    assert any(not torch.equal(before[name], after[name]) for name in before)
    # Its base is the first adapter's base, by embedded name: it loads like any shipped adapter.
    assert json.loads((second / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny-random"
    again = ["--model_name_or_path", str(first), "--output_dir", str(tmp_path / "x"), *common]
    with pytest.raises(ValueError, match="trained on 'compact' prompts"):
        main([*again, "--prompt_style", "paper"])  # one adapter, one prompt style
    # ... except compact on to grounded, which only adds lines to the judge's prompt; the new adapter records it.
    main(
        [
            "--model_name_or_path",
            str(first),
            "--output_dir",
            str(tmp_path / "grounded"),
            *common,
            "--prompt_style",
            "grounded",
        ]
    )
    assert model_prompt_style(str(tmp_path / "grounded")) == "grounded"
    with pytest.raises(ValueError, match="LoRA adapter"):
        main([*again, "--use_peft", "false"])
