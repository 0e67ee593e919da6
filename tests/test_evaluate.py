"""dynaweb-eval: seeds, policy loading (models, adapters, experts), results, and real-browser runs."""

from __future__ import annotations

import json

import pytest
import torch
from gymnasium.vector import VectorWrapper

from dynaweb_env.llm.base import Generation, SamplingParams
from dynaweb_env.observation import make_observation
from dynaweb_trainer.encoding import EpisodeEncoder
from dynaweb_trainer.evaluate import (
    TASK_SUITES,
    EvalConfig,
    evaluate_policy,
    format_table,
    main,
    make_real_vector_env,
    parse_config,
    parse_seeds,
    partial_results_path,
    summarize_records,
)
from dynaweb_trainer.policy import (
    CompletionIdsBackend,
    PolicyLoadError,
    PolicyTurn,
    ScriptedExpertPolicy,
    load_policy,
    resolve_checkpoint_dir,
)

CLICK_TREE = "RootWebArea 'Click Test Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-random"))


def test_parse_seeds():
    assert parse_seeds("100-103") == [100, 101, 102, 103]
    assert parse_seeds("5,1-2, 9") == [5, 1, 2, 9]
    assert parse_seeds(["3", "5-6"]) == [3, 5, 6]
    for bad in ("", "a-b", "9-3", "-1", ["3", "3-4"]):  # a seed given twice is refused, as by dynaweb-build-data
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_task_lists_expand_suite_names():
    from dynaweb_env.data.tasks import LONG_TASKS, MULTISTEP_TASKS, expand_tasks

    assert expand_tasks("long") == list(LONG_TASKS)
    # Ids and suites mix; a task named twice (login-user is in both) is kept once, where it first appears.
    mixed = expand_tasks(["miniwob.login-user,multistep", "miniwob.click-button"])
    others = [task for task in MULTISTEP_TASKS if task != "miniwob.login-user"]
    assert mixed == ["miniwob.login-user", *others, "miniwob.click-button"]
    assert EvalConfig(tasks=["small"]).tasks == list(TASK_SUITES["small"])
    with pytest.raises(ValueError, match="no task"):
        expand_tasks(" , ")


def test_config_cli_and_yaml(tmp_path):
    config_file = tmp_path / "eval.yaml"
    config_file.write_text("policy: tiny-random\nseeds: 100-149\nnum_envs: 8\n")
    config = parse_config(["--config", str(config_file), "--tasks", "miniwob.click-button", "miniwob.enter-text",
                           "--num-envs", "2", "--max-steps", "3"])  # fmt: skip
    assert (config.policy, config.num_envs, config.max_steps, config.temperature) == ("tiny-random", 2, 3, 0.0)
    assert len(config.start_options()) == 100
    assert config.start_options()[0] == {"task": "miniwob.click-button", "task_seed": 100}
    with pytest.raises(ValueError, match="num_envs"):
        EvalConfig(num_envs=0)
    with pytest.raises(ValueError, match="seed"):
        EvalConfig(seeds="x")


def test_summary_and_table():
    def record(task, success, steps, errors):
        return {"task_id": task, "success": success, "reward": float(success), "steps": steps, "action_errors": errors}

    records = [record("a", True, 2, ["", ""]), record("a", False, 4, ["invalid action: x", "", "", ""]),
               record("b", True, 1, [""])]  # fmt: skip
    summary, per_task = summarize_records(records)
    assert summary["success_rate"] == pytest.approx(2 / 3) and summary["mean_steps"] == pytest.approx(7 / 3)
    assert per_task["a"]["success_rate"] == 0.5 and per_task["a"]["invalid_action_rate"] == pytest.approx(1 / 6)
    table = format_table(summary, per_task).splitlines()
    assert table[0].split()[:3] == ["task", "episodes", "success"] and table[-1].split()[:3] == ["all", "3", "0.67"]


def test_missing_policy_paths_are_clear_errors(tmp_path, capsys):
    with pytest.raises(PolicyLoadError, match="policy path not found: .*no-such-adapter"):
        load_policy(str(tmp_path / "no-such-adapter"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PolicyLoadError, match="adapter_config.json .*config.json .*checkpoint-"):
        load_policy(str(empty))
    orphan = tmp_path / "orphan-adapter"
    orphan.mkdir()
    (orphan / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(PolicyLoadError, match="base model of adapter .*orphan-adapter not found"):
        load_policy(str(orphan))
    # The command line reports it and exits with status 2, before any browser starts.
    assert main(["--policy", str(tmp_path / "no-such-adapter"), "--output", str(tmp_path / "r.json")]) == 2
    assert "policy path not found" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_lora_adapter_directory_loads_on_its_base(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from dynaweb_env.models import resolve_model

    base_path = resolve_model("tiny-random")
    base = AutoModelForCausalLM.from_pretrained(base_path)
    # Non-zero adapter weights, so that a policy that ignored the adapter would give different logits.
    adapter = get_peft_model(base, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    adapter.save_pretrained(tmp_path / "run" / "checkpoint-7")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = adapter(input_ids=ids).logits
        plain = adapter.get_base_model().__class__.from_pretrained(base_path)(input_ids=ids).logits

    assert resolve_checkpoint_dir(tmp_path / "run") == (tmp_path / "run" / "checkpoint-7", "adapter")
    policy = load_policy(str(tmp_path / "run"))  # a training output dir: its latest checkpoint
    assert policy.kind == "adapter" and policy.details["base_model"] == str(base_path)
    assert policy.policy.backend.prefix_states is not None  # frozen: its system prompt's cache is kept
    assert policy.policy.backend.prompt_states is not None  # and its last prompts, which its next turns extend
    with torch.no_grad():
        logits = policy.policy.backend.model(input_ids=ids).logits
    assert torch.allclose(logits, expected, atol=1e-4) and not torch.allclose(logits, plain, atol=1e-3)
    [generation] = policy.policy.backend.generate_from_ids([[1, 2, 3]], SamplingParams(max_new_tokens=3, temperature=0))
    assert len(generation.completion_ids) >= 1


def test_expert_policy_answers_each_episode_from_its_own_page(tokenizer):
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=4000)
    click = make_observation('Click on the "TWO" button.', "file:///click-button.html", CLICK_TREE)
    text = make_observation('Enter "Bob" into the text field.', "file:///enter-text.html",
                            "RootWebArea 'Enter Text'\n\t[5] textbox ''\n\t[6] button 'Submit'")  # fmt: skip
    policy = ScriptedExpertPolicy(tokenizer)
    first = encoder.start(click)
    later = encoder.start(text)
    later.add_policy_turn(encoder.response_ids("REASON: x\nACTION: click [1]"))
    encoder.add_observation(later, text)
    turns = [
        PolicyTurn(click, {"task_id": "miniwob.click-button"}, first),
        PolicyTurn(text, {}, later, {"task": "miniwob.enter-text"}),  # no task_id in info: the reset option
    ]
    generations = policy.act(turns, SamplingParams(temperature=0))
    assert generations[0].text.endswith("ACTION: click [14]")
    assert "ACTION: type [5] [Bob]" in generations[1].text
    assert generations[0].completion_ids[-1] == tokenizer.eos_token_id
    assert generations[0].completion_ids == encoder.response_ids(generations[0].text)
    assert generations[0].prompt_ids == first.input_ids
    # A page the expert does not recognise ends the episode instead of crashing the evaluation.
    unknown = make_observation('Click on the "TWO" button.', "file:///x.html", "RootWebArea ''")
    [answer] = policy.act([PolicyTurn(unknown, {"task_id": "miniwob.click-button"}, first)], SamplingParams())
    assert answer.text.endswith("ACTION: stop [N/A]") and "does not recognise" in answer.text
    [answer] = policy.act([PolicyTurn(unknown, {"task_id": "miniwob.no-expert"}, first)], SamplingParams())
    assert answer.text.endswith("ACTION: stop [N/A]") and "no scripted expert" in answer.text


@pytest.mark.browser
def test_expert_policy_solves_two_tasks_in_real_browsers(tmp_path):
    output = tmp_path / "expert.json"
    config = EvalConfig(policy="expert", tasks=["miniwob.click-button", "miniwob.enter-text"], seeds="100-101",
                        num_envs=2, output=str(output))  # fmt: skip
    report = evaluate_policy(config, command="dynaweb-eval --policy expert", show_progress=False)
    assert report["summary"]["success_rate"] == 1.0 and report["summary"]["episodes"] == 4
    saved = json.loads(output.read_text())
    assert saved["per_task"]["miniwob.enter-text"]["success_rate"] == 1.0 and saved["num_envs"] == 2
    assert {(e["task_id"], e["task_seed"]) for e in saved["episodes"]} == {
        (task, seed) for task in config.tasks for seed in (100, 101)
    }
    assert all(e["actions"] and e["end_reason"] == "terminated" for e in saved["episodes"])
    assert saved["command"] == "dynaweb-eval --policy expert" and saved["config"]["seeds"] == "100-101"


class _DiesAfterSteps(VectorWrapper):
    """A vector env whose browser "dies" (raises) after ``steps`` steps: an interrupted evaluation."""

    def __init__(self, env, steps: int):
        super().__init__(env)
        self.steps = steps

    def step(self, actions):
        self.steps -= 1
        if self.steps < 0:
            raise RuntimeError("browser died")
        return self.env.step(actions)


def test_resumed_evaluation_gives_a_record_cut_before_its_newline_one(tmp_path, tokenizer):
    """A run killed between a record and its newline: the next run appends on a line of its own."""
    from dynaweb_trainer.identity_env import TASK_ID, make_click_button_vector_env
    from dynaweb_trainer.policy import LoadedPolicy, ScriptedPolicy

    clicker = ScriptedPolicy(tokenizer, lambda turn: "REASON: the first button.\nACTION: click [1]")
    policy = LoadedPolicy("clicker", "scripted", tokenizer, clicker)
    config = EvalConfig(policy="clicker", tasks=[TASK_ID], seeds="0-2", num_envs=1, max_steps=1,
                        output=str(tmp_path / "eval.json"))  # fmt: skip
    with pytest.raises(RuntimeError, match="browser died"):
        evaluate_policy(config, policy, _DiesAfterSteps(make_click_button_vector_env(1), 1), show_progress=False)
    partial = partial_results_path(config.output)
    partial.write_text(partial.read_text().rstrip("\n"))  # the kill came before the record's newline
    with pytest.raises(RuntimeError, match="browser died"):
        evaluate_policy(config, policy, _DiesAfterSteps(make_click_button_vector_env(1), 1), show_progress=False)
    records = [json.loads(line) for line in partial.read_text().splitlines()]  # every line whole
    assert [record.get("task_seed") for record in records[1:]] == [0, 1]
    report = evaluate_policy(config, policy, make_click_button_vector_env(1), show_progress=False)
    assert report["resumed_episodes"] == 2 and [e["task_seed"] for e in report["episodes"]] == [0, 1, 2]


def test_a_record_lacking_a_later_setting_ran_with_its_default():
    from dataclasses import asdict

    from dynaweb_trainer.evaluate import same_settings

    config = EvalConfig(policy="expert", tasks=["miniwob.click-button"], seeds="100-102", output="a.json")
    recorded = json.loads(json.dumps(asdict(config)))
    del recorded["page_history"]  # written before the setting existed
    assert same_settings(recorded, config) and same_settings({**recorded, "output": "b.json"}, config)
    assert not same_settings(recorded, EvalConfig(**{**config.__dict__, "page_history": "edits"}))
    assert not same_settings({**recorded, "output": "b.json"}, config, ignore=("num_envs",))


@pytest.mark.browser
def test_interrupted_evaluation_resumes_where_it_stopped(tmp_path):
    output = tmp_path / "expert.json"
    config = EvalConfig(policy="expert", tasks=["miniwob.click-button"], seeds="100-102", num_envs=1,
                        output=str(output))  # fmt: skip
    env = make_real_vector_env(config, 1)
    try:
        with pytest.raises(RuntimeError, match="browser died"):  # click-button takes one step per episode
            evaluate_policy(config, vector_env=_DiesAfterSteps(env, 2), show_progress=False)
    finally:
        env.close()
    partial = partial_results_path(output)
    lines = partial.read_text().splitlines()
    assert not output.exists() and len(lines) == 1 + 2  # header + the two finished episodes
    partial.write_text("\n".join(lines[:2]) + "\n{not json\n")  # a line cut by the crash: that episode reruns

    with pytest.raises(ValueError, match="another evaluation configuration"):
        evaluate_policy(EvalConfig(**{**config.__dict__, "max_steps": 3}), show_progress=False)
    with pytest.warns(UserWarning, match="corrupt record"):
        report = evaluate_policy(config, show_progress=False)
    assert report["resumed_episodes"] == 1 and report["rollout_stats"]["episodes"] == 2
    assert [e["task_seed"] for e in report["episodes"]] == [100, 101, 102]
    assert report["summary"]["success_rate"] == 1.0 and not partial.exists()
    # Killed after its last episode but before the JSON: the rerun only writes the JSON, no browser needed.
    partial.write_text("\n".join([lines[0], *map(json.dumps, report["episodes"])]) + "\n")
    again = evaluate_policy(config, show_progress=False)
    assert again["resumed_episodes"] == 3 and again["episodes"] == report["episodes"] and again["num_envs"] == 0


@pytest.mark.browser
@pytest.mark.parametrize("page_history", ["full", "actions"])
def test_tiny_random_policy_runs_end_to_end(tmp_path, capsys, page_history):
    output = tmp_path / "tiny.json"
    status = main(["--policy", "tiny-random", "--tasks", "miniwob.click-button", "--seeds", "3-4", "--num-envs", "2",
                   "--max-steps", "2", "--max-new-tokens", "12", "--page_history", page_history,
                   "--output", str(output)])  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "miniwob.click-button" in printed and "success rate" in printed
    saved = json.loads(output.read_text())
    assert saved["policy"]["kind"] == "model" and saved["summary"]["episodes"] == 2
    assert saved["rollout_stats"]["generate_calls"] >= 1
    for episode in saved["episodes"]:
        assert 1 <= episode["steps"] <= 2 and len(episode["responses"]) == episode["steps"]
        assert episode["success"] in (True, False) and episode["end_reason"] in ("terminated", "truncated", "max_steps")
    assert saved["command"].startswith("dynaweb-eval --policy tiny-random")
    assert saved["config"]["page_history"] == page_history


def test_server_policy_turns_always_carry_token_ids(tokenizer):
    class TextOnlyServer:
        model_name = "server"

        def generate_from_ids(self, prompt_ids, params):
            return [Generation("REASON: r\nACTION: click [3]", list(ids), [], [], "stop") for ids in prompt_ids]

    backend = CompletionIdsBackend(TextOnlyServer(), tokenizer)
    [generation] = backend.generate_from_ids([[1, 2]], SamplingParams())
    assert generation.completion_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(generation.completion_ids[:-1]) == "REASON: r\nACTION: click [3]"
    policy = load_policy("openai:some-model@http://127.0.0.1:9/v1", tokenizer="tiny-random")
    assert policy.kind == "server" and isinstance(policy.policy.backend, CompletionIdsBackend)
