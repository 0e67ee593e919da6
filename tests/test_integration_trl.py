"""TRL: one real GRPOTrainer step with ``environment_factory`` on DreamWeb-v0, and the tool-calling template."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="needs the train extra: pip install 'dynaweb[train]'")

from transformers import AutoTokenizer  # noqa: E402

from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES  # noqa: E402
from dynaweb_env.integrations.trl import (  # noqa: E402
    DreamWebTools,
    dreamweb_environment_factory,
    dreamweb_prompts,
)
from dynaweb_env.models import CHATML_TEMPLATE, prepare_model  # noqa: E402
from dynaweb_env.tool_calling import TOOL_CALLING_CHAT_TEMPLATE  # noqa: E402

ENV_KWARGS = {"world_model": "tiny-random", "judge": "world_model", "max_new_tokens": 8, "judge_max_new_tokens": 4,
              "dream_length": 2}  # fmt: skip


def test_embedded_template_supports_tools_and_renders_plain_chats_as_before():
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("tiny-random"))
    assert tokenizer.chat_template == TOOL_CALLING_CHAT_TEMPLATE and tokenizer.response_template
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    chats = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
    ]
    for chat in chats:
        for prompt in (True, False):
            new = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt)
            old = tokenizer.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=prompt, chat_template=CHATML_TEMPLATE
            )
            assert new == old
    call = '<tool_call>\n{"name": "click", "arguments": {"element_id": "13"}}\n</tool_call><|im_end|>'
    parsed = tokenizer.parse_response(call, prefix="<|im_start|>assistant\n")
    assert parsed["tool_calls"][0]["function"] == {"name": "click", "arguments": {"element_id": "13"}}


def test_a_model_prepared_before_the_template_gets_it(tmp_path, monkeypatch):
    import shutil

    from dynaweb_env import models

    old = tmp_path / "models" / "tiny-random"
    shutil.copytree(prepare_model("tiny-random"), old)
    tokenizer = AutoTokenizer.from_pretrained(old)
    tokenizer.chat_template, tokenizer.response_template = CHATML_TEMPLATE, None
    tokenizer.save_pretrained(old)  # as an earlier version of the project wrote it
    monkeypatch.setenv(models.CACHE_ENV_VAR, str(tmp_path))
    assert prepare_model("tiny-random") == old
    assert AutoTokenizer.from_pretrained(old).chat_template == TOOL_CALLING_CHAT_TEMPLATE


def test_tools_act_on_the_dream_and_the_reward_is_a_verdict():
    tools = dreamweb_environment_factory(**ENV_KWARGS)()
    page = tools.reset(prompt=[], task="miniwob.click-button", task_seed=0, step_index=0, seed=3)
    assert "OBJECTIVE:" in page and "[13] button" in page
    after = tools.click("13")
    assert "PREVIOUS ACTION: click [13]" in after and "episode has ended" not in after
    tools.reset(task="miniwob.click-button", task_seed=0)
    assert tools.get_reward() == 0.0 and tools._episode.judged  # nothing done: a verdict by rule
    tools.reset(task="miniwob.click-button", task_seed=0)
    tools.click("13")
    ended = tools.stop("ONE")
    assert "The episode has ended (stop)" in ended
    # The random model wrote no verdict: the 0 is reported as none, not as a verdict.
    assert not tools._episode.judged and tools._episode.info["judge_error"]
    with pytest.raises(ValueError, match="ended"):
        tools.click("13")
    with pytest.raises(ValueError, match="unknown task"):
        dreamweb_environment_factory(tasks=["no.such-task"])


def _forced_tool_call_bias(tokenizer, text: str) -> list:
    """``sequence_bias`` entries that make any model write ``text``: each prefix extends the last by one token."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [[ids[: k + 1], 100.0 * (k + 1)] for k in range(len(ids))]


def test_grpo_trainer_step_with_environment_factory(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    model = str(prepare_model("tiny-random"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    # The random policy is steered (a logits bias) to call click on element 13: the tool loop,
    # the parsing of tool calls, the dream steps and the judge all run for real.
    call = '<tool_call>\n{"name": "click", "arguments": {"element_id": "13"}}\n</tool_call><|im_end|>'
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4096,
        max_tool_calling_iterations=1,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        generation_kwargs={"sequence_bias": _forced_tool_call_bias(tokenizer, call)},
    )
    created: list[DreamWebTools] = []
    # The small shipped set, whose click-button pages all hold the [13] the forced tool call clicks.
    small = str(EXPERT_TRAJECTORIES)
    factory = dreamweb_environment_factory(**{**ENV_KWARGS, "dream_length": 3, "start_states": small})

    def make_tools() -> DreamWebTools:
        created.append(factory())
        return created[-1]

    trainer = GRPOTrainer(
        model=model,
        args=args,
        train_dataset=dreamweb_prompts(2, seed=0, tasks=["miniwob.click-button"], start_states=small),
        environment_factory=make_tools,
    )
    trainer.train()
    logged = trainer.state.log_history[0]
    assert "loss" in logged and "rewards/DreamWebTools/mean" in logged
    played = [tools._episode for tools in created if tools._episode.num_steps]
    assert len(played) == 2
    for episode in played:
        # One click, then TRL's tool-call cap ended the rollout mid-dream: get_reward judged it then.
        assert episode.num_steps == 1 and episode.done and episode.info["judge_error"]  # asked; no verdict
        assert episode.info["end_reason"] == "finish" and episode.observation["last_action"] == "click [13]"
    assert json.dumps(logged)  # plain numbers
