"""Policy SFT: loss only on the policy's turns, real TRL steps that learn, checkpoints that resume."""

from __future__ import annotations

import json
import re

import pytest
import torch

from dynaweb_env.data.io import write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.llm.base import SamplingParams
from dynaweb_trainer.encoding import encode_expert_trajectory
from dynaweb_trainer.sft import (
    IGNORE_INDEX,
    PolicySFTConfig,
    build_sft_dataset,
    build_sft_example,
    build_sft_trainer,
    load_expert_trajectories,
    main,
    parse_config,
    train_policy_sft,
)

TREE = "RootWebArea 'Click Test Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"


def make_trajectory(index: int, split: str = "train", success: bool = True) -> Trajectory:
    target, other = ("13", "ONE") if index % 2 == 0 else ("14", "TWO")
    steps = [
        Step(url="file:///click.html", axtree=TREE, action=f"click [{target}]", reasoning=f"{other} is [{target}]."),
        Step(url="file:///click.html", axtree=TREE, action="stop [N/A]", reasoning="Clicked it."),
    ]
    return Trajectory(
        id=f"click/{index}", task_id="miniwob.click-button", goal=f'Click on the "{other}" button.', source="expert",
        steps=steps, success=success, reward=float(success), metadata={"split": split, "seed": index},
    )  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-random"))


def tiny_config(tmp_path, **overrides) -> PolicySFTConfig:
    values = dict(
        output_dir=str(tmp_path / "sft"), model_name_or_path="tiny-random", max_steps=3,
        per_device_train_batch_size=1, learning_rate=5e-3, save_steps=3, seed=0, disable_tqdm=True,
    )  # fmt: skip
    values.update(overrides)
    return PolicySFTConfig(**values)


def test_labels_are_ignored_exactly_off_the_policy_turns(tokenizer):
    trajectory = make_trajectory(0)
    episode = encode_expert_trajectory(tokenizer, trajectory)
    example = build_sft_example(episode.prompt_ids, episode.completion_ids, episode.env_mask)
    ids, labels = example["input_ids"], example["labels"]
    mask = [0] * len(episode.prompt_ids) + episode.env_mask
    assert ids == episode.prompt_ids + episode.completion_ids and len(labels) == len(ids)
    for token, label, keep in zip(ids, labels, mask, strict=True):
        assert label == (token if keep else IGNORE_INDEX)
    # What is learned is the two expert responses (each ending with EOS), and nothing of the observations.
    learned = tokenizer.decode([label for label in labels if label != IGNORE_INDEX])
    eos = tokenizer.eos_token
    assert learned == f"REASON: ONE is [13].\nACTION: click [13]{eos}REASON: Clicked it.\nACTION: stop [N/A]{eos}"
    assert "OBJECTIVE" in tokenizer.decode(ids) and "OBJECTIVE" not in learned


def test_build_sft_example_rejects_bad_masks():
    with pytest.raises(ValueError, match="env_mask has 1 entries for 2"):
        build_sft_example([1], [2, 3], [1])
    with pytest.raises(ValueError, match="no policy tokens"):
        build_sft_example([1], [2, 3], [0, 0])


def test_dataset_one_row_per_episode(tokenizer):
    dataset = build_sft_dataset(tokenizer, [make_trajectory(0), make_trajectory(1)], max_axtree_chars=50)
    assert dataset.num_rows == 2 and set(dataset.column_names) == {"input_ids", "labels", "trajectory_id"}
    assert dataset["trajectory_id"] == ["click/0", "click/1"]


def test_an_edits_history_shortens_long_tasks_real_expert_episodes(tokenizer):
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
    from dynaweb_trainer.config import GSPOConfig
    from dynaweb_trainer.evaluate import EvalConfig

    experts = read_trajectories(ALL_TASKS_DATA_DIR / "train" / "expert.jsonl.xz")
    trajectory = next(t for t in experts if t.task_id == "miniwob.number-checkboxes")  # ~14 ticks on one page
    full, edits = (build_sft_dataset(tokenizer, [trajectory], 0, page_history=history) for history in ("full", "edits"))
    assert len(edits["input_ids"][0]) < len(full["input_ids"][0]) / 2
    policy_tokens = [sum(label != IGNORE_INDEX for label in rows["labels"][0]) for rows in (full, edits)]
    assert policy_tokens[0] == policy_tokens[1]  # the same turns are learned, from a shorter history
    for config, kwargs in ((PolicySFTConfig, {"output_dir": "x"}), (EvalConfig, {}), (GSPOConfig, {"output_dir": "x"})):
        with pytest.raises(ValueError, match="page_history"):
            config(**kwargs, page_history="diff")


def test_an_actions_history_makes_one_bounded_example_a_turn(tokenizer, tmp_path):
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR

    experts = read_trajectories(ALL_TASKS_DATA_DIR / "train" / "expert.jsonl.xz")
    trajectory = next(t for t in experts if t.task_id == "miniwob.number-checkboxes")
    edits, turns = (build_sft_dataset(tokenizer, [trajectory], 0, page_history=h) for h in ("edits", "actions"))
    actions = [step for step in trajectory.steps if step.action]
    assert turns.num_rows == len(actions) > 10 and set(turns["trajectory_id"]) == {trajectory.id}
    labelled = [[label for label in row if label != IGNORE_INDEX] for row in turns["labels"]]
    assert sum(map(len, labelled)) == sum(label != IGNORE_INDEX for label in edits["labels"][0])  # same answers
    assert all(row[-len(lab) :] == lab for row, lab in zip(turns["input_ids"], labelled, strict=True))  # answer last
    assert max(map(len, turns["input_ids"])) < 1.5 * len(turns["input_ids"][0])  # each turn about one page long
    # A real TRL step on the per-turn rows, from the command line's config.
    trainer, stats = build_sft_trainer(tiny_config(tmp_path, max_steps=1, page_history="actions"), [trajectory])
    assert stats["examples"] == len(actions) and stats["trajectories"] == 1
    trainer.train()
    assert [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_load_expert_trajectories_selects_and_reports(tmp_path):
    path = tmp_path / "experts.jsonl"
    write_trajectories(path, [make_trajectory(0), make_trajectory(1, split="test"), make_trajectory(2, success=False)])
    assert [t.id for t in load_expert_trajectories([path], "train")] == ["click/0"]
    assert [t.id for t in load_expert_trajectories([path], None, successful_only=False)] == [
        "click/0", "click/1", "click/2",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"splits present: \{'train': 2, 'test': 1\}"):
        load_expert_trajectories([path], "valid")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_expert_trajectories([tmp_path / "missing.jsonl"])
    with path.open("a") as handle:
        handle.write("{corrupt\n")
    with pytest.warns(UserWarning, match=r"experts.jsonl:4"):
        assert len(load_expert_trajectories([path], "train")) == 1


def test_config_from_yaml_and_flags(tmp_path):
    config_file = tmp_path / "sft.yaml"
    config_file.write_text("model_name_or_path: tiny-random\nlora_r: 4\nmax_steps: 3\ndataset_split: all\n")
    config = parse_config(["--config", str(config_file), "--lora_r", "8", "--output_dir", str(tmp_path / "o")])
    assert (config.model_name_or_path, config.lora_r, config.max_steps) == ("tiny-random", 8, 3)
    assert config.dataset_split is None and config.use_peft and config.learning_rate == 1e-3
    with pytest.raises(ValueError, match="lora_r"):
        PolicySFTConfig(output_dir=str(tmp_path), lora_r=0)


def test_sft_trains_tiny_random_lora_and_resumes(tmp_path):
    trajectories = [make_trajectory(index) for index in range(2)]
    config = tiny_config(tmp_path)
    trainer, stats = build_sft_trainer(config, trajectories)
    # TRL keeps our labels as they are: the loss sees only the policy's tokens.
    prepared = trainer.train_dataset
    assert sum(label != IGNORE_INDEX for row in prepared["labels"] for label in row) == stats["policy_tokens"]
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert before and all("lora" in name for name in before)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and losses[-1] < losses[0]
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[name], after[name].detach()) for name in before)

    # A checkpoint was written at step 3; resuming from it continues the step count.
    summary = train_policy_sft(tiny_config(tmp_path, max_steps=4, resume_from_checkpoint="last"), trajectories)
    assert summary["resumed_from"].endswith("checkpoint-3") and summary["steps"] == 4
    output = tmp_path / "sft"
    assert (output / "adapter_config.json").is_file() and (output / "tokenizer_config.json").is_file()
    assert json.loads((output / "sft_summary.json").read_text())["steps"] == 4


def test_labelled_positions_head_matches_trl_loss_and_gradients(tmp_path):
    from trl import SFTTrainer

    # No LoRA dropout: both passes must see the same network. In fp32: TRL's head runs under bf16 autocast when
    # bf16 is on, ours in fp32 (tests/test_train_wm.py checks autocast reaches the backbone).
    trainer, _ = build_sft_trainer(tiny_config(tmp_path, per_device_train_batch_size=2, lora_dropout=0.0, bf16=False),
                                   [make_trajectory(0), make_trajectory(1), make_trajectory(2)])  # fmt: skip
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    results = []
    for compute_loss in (trainer.compute_loss, lambda *a, **k: SFTTrainer.compute_loss(trainer, *a, **k)):
        trainer.model.zero_grad()
        loss = compute_loss(trainer.model, dict(batch), num_items_in_batch=None)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in params]))
    (ours, our_grads), (trl, trl_grads) = results
    assert torch.allclose(ours, trl, rtol=1e-5) and ours > 0
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-6) for a, b in zip(our_grads, trl_grads, strict=True))
    assert any(grad.abs().sum() > 0 for grad in our_grads)
    metrics = trainer._metrics["train"]
    assert metrics["entropy"][0] == pytest.approx(metrics["entropy"][1], rel=1e-4)
    assert metrics["mean_token_accuracy"][0] == pytest.approx(metrics["mean_token_accuracy"][1])


def test_full_fine_tuning_saves_a_model(tmp_path):
    summary = train_policy_sft(tiny_config(tmp_path, use_peft=False, max_steps=1, save_strategy="no"),
                               [make_trajectory(0), make_trajectory(1)])  # fmt: skip
    assert not summary["adapter"] and summary["steps"] == 1
    assert (tmp_path / "sft" / "config.json").is_file() and not (tmp_path / "sft" / "adapter_config.json").exists()


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_policy_sft(tiny_config(tmp_path, resume_from_checkpoint="last"), [make_trajectory(0)])


def test_command_line_reports_bad_data_before_loading_a_model(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text("{not json\n")
    assert main(["--dataset_path", str(tmp_path / "missing.jsonl"), "--output_dir", str(tmp_path / "o")]) == 2
    assert "expert trajectory file not found" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="corrupt.jsonl:1"):
        assert main(["--dataset_path", str(corrupt), "--output_dir", str(tmp_path / "o")]) == 2
    assert "no trajectories in" in capsys.readouterr().err


def well_formed(response: str) -> bool:
    """The response has an ``ACTION:`` line whose first line is one action of the grammar."""
    from dynaweb_env.actions import ActionParseError, parse_action

    match = re.search(r"ACTION\s*:\s*(.*)", response)
    if not match or not match.group(1).strip():
        return False
    try:
        parse_action(match.group(1).strip())
    except ActionParseError:
        return False
    return True


@pytest.mark.slow
def test_sft_of_smollm2_teaches_the_action_format(tmp_path):
    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_trainer.encoding import EpisodeEncoder, trajectory_observations
    from dynaweb_trainer.policy import load_policy

    held_out = load_expert_trajectories(None, "test")  # one unseen seed per task of the shipped data
    params = SamplingParams(max_new_tokens=40, temperature=0)

    def format_rate(backend) -> float:
        encoder = EpisodeEncoder(backend.tokenizer, max_axtree_chars=4000)
        prompts = [encoder.prompt_ids(trajectory_observations(t)[0]) for t in held_out]
        return sum(well_formed(g.text) for g in backend.generate_from_ids(prompts, params)) / len(prompts)

    before = format_rate(TransformersBackend("smollm2-135m"))
    config = PolicySFTConfig(output_dir=str(tmp_path / "sft"), model_name_or_path="smollm2-135m", max_steps=12,
                             learning_rate=1e-3, per_device_train_batch_size=1, save_strategy="no", seed=0)  # fmt: skip
    summary = train_policy_sft(config)
    assert summary["steps"] == 12 and summary["last_loss"] < summary["first_loss"]
    after = format_rate(load_policy(str(tmp_path / "sft")).policy.backend)
    print(f"well-formed actions on held-out pages: {before:.2f} before SFT, {after:.2f} after")
    assert after > before and after >= 0.75


def test_a_max_length_that_cuts_every_action_is_refused(tmp_path, capsys):
    """``--max_length`` below every episode's first action stops with exit 2 and the length to use, before training."""
    assert main(["--max_length", "64", "--output_dir", str(tmp_path / "o")]) == 2
    message = capsys.readouterr().err
    assert "--max_length 64 cuts every episode before its first action" in message and "raise --max_length" in message
    assert not (tmp_path / "o").exists()
