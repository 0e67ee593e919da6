"""Reward guards of DreamWeb-v0 (judge votes, world-model uncertainty, gated termination) and prompt styles."""

from __future__ import annotations

import json
import math
import re

import gymnasium as gym
import pytest
from test_dream_env import start_file  # noqa: F401  (fixture)

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.envs.dream import DreamWebEnv, build_dynamics
from dynaweb_env.envs.dream_guards import RewardGuards
from dynaweb_env.envs.dream_vector import DreamWebVectorEnv
from dynaweb_env.llm.base import Generation
from dynaweb_env.models import SHIPPED_ADAPTERS, TRAINED_JUDGE, WORLD_MODEL_INFO_FILE, model_prompt_style
from dynaweb_env.observation import axtree_element_ids
from dynaweb_env.world_model import format_world_model_target
from dynaweb_env.world_model.judge import (
    COMPACT_JUDGE_SYSTEM_PROMPT,
    JUDGE_SYSTEM_PROMPT,
    JudgeRequest,
    JudgeStep,
    TrajectoryJudge,
    format_judge_target,
    parse_judge_output,
)
from dynaweb_env.world_model.model import WebWorldModel, WorldModelRequest
from dynaweb_env.world_model.output_format import PATCH_HEADER
from dynaweb_env.world_model.prompts import COMPACT_WORLD_MODEL_SYSTEM_PROMPT


class GuardBackend:
    """World model and judge for guard tests; its batch rows differ as sampled rows would.

    World model: marks the acted element focused; ``click [14]`` ends the episode on rows listed in
    ``terminal_rows`` (all rows by default). Judge: the verdict of row ``i`` is ``verdicts[i % len]``.
    """

    model_name = "guards"

    def __init__(self, verdicts=("SUCCESS",), terminal_rows=None):
        self.verdicts, self.terminal_rows = verdicts, terminal_rows
        self.calls: list[tuple[str, int]] = []

    def generate(self, conversations, params):
        kind = "judge" if conversations[0][0]["content"] in (JUDGE_SYSTEM_PROMPT, COMPACT_JUDGE_SYSTEM_PROMPT) else "wm"
        self.calls.append((kind, len(conversations)))
        if kind == "judge":
            return [Generation(f"VERDICT: {self.verdicts[i % len(self.verdicts)]}") for i in range(len(conversations))]
        return [Generation(self._predict(row, conv[1]["content"])) for row, conv in enumerate(conversations)]

    def _predict(self, row: int, user: str) -> str:
        action = user.rsplit("CURRENT ACTION: ", 1)[1]
        tree = user.split("CURRENT ACCESSIBILITY TREE:\n", 1)[1].split("\nPREVIOUS ACTION:", 1)[0]
        element = re.search(r"\[(\d+)\]", action).group(1)
        tree = re.sub(rf"(\[{element}\] [^\n]*)", r"\1, focused", tree)
        terminal = action == "click [14]" and (self.terminal_rows is None or row in self.terminal_rows)
        return format_world_model_target(f"{action} focuses {element}.", "", tree, terminal)


def dream(start_file, backend, **guards) -> DreamWebEnv:  # noqa: F811
    # Each test here isolates one guard. The fixture's goal names button ONE, which "stop [ONE]" and "click [14]"
    # never act on, so the default objective check would withhold every SUCCESS (it has tests of its own).
    guards.setdefault("objective_check", False)
    env = DreamWebEnv(world_model=backend, judge="world_model", start_states=start_file, dream_length=3,
                      reward_guards=guards)  # fmt: skip
    env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": 1})
    return env


# --- options -------------------------------------------------------------------------------------


def test_guards_default_off_and_bad_options_are_clear_errors():
    assert RewardGuards.parse(None) == RewardGuards() and RewardGuards().active == ["objective_check"]  # the default
    assert RewardGuards(objective_check=False).active == []  # the paper's dream
    guards = RewardGuards.parse({"judge_votes": 3, "gate_termination": True})
    assert guards.active == ["judge_votes", "gate_termination", "objective_check"]
    assert RewardGuards.parse(guards) is guards
    for bad, message in (
        ({"judge_vote": 3}, "unknown reward_guards"),
        ({"judge_votes": 0}, "judge_votes"),
        ({"world_model_samples": True}, "world_model_samples"),
        ({"uncertainty": "drop"}, "uncertainty"),
        ({"uncertainty_discount": 1.5}, "uncertainty_discount"),
        ({"disagreement_on": "url"}, "disagreement_on"),
        ({"judge_vote_temperature": 0}, "judge_vote_temperature"),
        ({"gate_termination": "yes"}, "gate_termination"),
        ({"world_model_retries": -1}, "world_model_retries"),
        ({"world_model_retries": 1.5}, "world_model_retries"),
        ({"progress_reward": 0.5}, "progress_reward"),
        ({"progress_reward": True}, "progress_reward"),
        ({"progress_reward": 0.25, "group_judging": "listwise"}, "progress_reward cannot"),
        ({"judge_threshold": 1.0}, "judge_threshold"),
        ({"judge_threshold": "auto"}, "judge_threshold"),
        ({"judge_threshold": True}, "judge_threshold"),
    ):
        with pytest.raises(ValueError, match=message):
            RewardGuards.parse(bad)
    with pytest.raises(ValueError, match="reward_guards must be"):
        gym.make("DreamWeb-v0", reward_guards=[1])


# --- the judge's success threshold --------------------------------------------------------------


class ProbabilityBackend:
    """A judge whose every verdict is FAILURE with ``P(SUCCESS)`` = ``probability`` (its verdict token's log-prob)."""

    model_name = "probability"

    def __init__(self, tokenizer, probability: float):
        self.tokenizer, self.probability = tokenizer, probability

    def generate(self, conversations, params):
        text = "VERDICT: FAILURE"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        first = next(i for i in range(len(ids)) if len(self.tokenizer.decode(ids[: i + 1])) > text.index("FAILURE"))
        logprobs = [math.log(1 - self.probability) if i == first else -0.01 for i in range(len(ids))]
        return [Generation(text, [1], ids, logprobs) for _ in conversations]


def test_a_success_threshold_pays_a_likely_success_and_the_objective_check_still_vetoes_it():
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    page = "RootWebArea 'Click Button Task'\n\t[13] button 'ONE'\n\t[14] button 'TWO'"
    goal, url = 'Click on the "ONE" button.', "file:///click-button.html"
    done = JudgeRequest(goal, (JudgeStep("click [13]", target="[13] button 'ONE'"),), url, page)
    wrong = JudgeRequest(goal, (JudgeStep("click [14]", target="[14] button 'TWO'"),), url, page)
    backend = ProbabilityBackend(tokenizer, 0.45)
    (word,) = TrajectoryJudge(backend, prompt_style="compact").judge([done])
    assert word.reward == 0.0 and word.success_probability == pytest.approx(0.45, abs=0.01)
    lenient = TrajectoryJudge(backend, prompt_style="compact", objective_check=True, success_threshold=0.4)
    paid, vetoed = lenient.judge([done, wrong])
    assert paid.reward == 1.0 and not paid.unmet
    assert paid.reasoning.startswith("P(SUCCESS) 0.45 >= threshold 0.4 (the verdict said FAILURE)")
    assert vetoed.reward == 0.0 and vetoed.unmet  # the wrong button: the check withholds it at any threshold
    (unsure,) = TrajectoryJudge(ProbabilityBackend(tokenizer, 0.3), success_threshold=0.4).judge([done])
    assert unsure.reward == 0.0
    (bare,) = TrajectoryJudge(GuardBackend(("FAILURE",)), success_threshold=0.01).judge([done])
    assert bare.reward == 0.0  # no log-probs: the verdict word
    for bad in (0, 1, 1.5, "0.4", True):
        with pytest.raises(ValueError, match="success_threshold"):
            TrajectoryJudge(backend, success_threshold=bad)


def test_the_default_dream_pays_at_the_threshold_recorded_beside_its_judge():
    from dynaweb_env.envs.dream_guards import judge_threshold_for
    from dynaweb_env.models import model_success_threshold

    assert model_success_threshold(TRAINED_JUDGE) == 0.4 and model_success_threshold("smollm2-135m-judge") is None
    assert judge_threshold_for(RewardGuards(), TRAINED_JUDGE) == 0.4
    assert judge_threshold_for(RewardGuards(objective_check=False), TRAINED_JUDGE) is None  # chosen with the check
    assert judge_threshold_for(RewardGuards(judge_threshold=None), TRAINED_JUDGE) is None  # the verdict word
    assert judge_threshold_for(RewardGuards(judge_threshold=0.3), "smollm2-135m-judge") == 0.3
    assert gym.make("DreamWeb-v0").unwrapped.dynamics.judge.success_threshold == 0.4
    word = gym.make("DreamWeb-v0", reward_guards={"judge_threshold": None}).unwrapped.dynamics.judge
    assert word.success_threshold is None


# --- judge self-consistency ---------------------------------------------------------------------


def test_judge_votes_abstain_when_they_split():
    request = JudgeRequest("Click ONE.", (JudgeStep("click [13]"),), "file:///c.html", "RootWebArea 'c'")
    split = TrajectoryJudge(GuardBackend(("SUCCESS", "FAILURE", "SUCCESS")), votes=3)
    (verdict,) = split.judge([request], seed=0)
    assert verdict.abstained and verdict.reward == 0.0 and verdict.votes == (1.0, 0.0, 1.0)
    assert "2 of 3 votes" in verdict.reasoning
    backend = GuardBackend(("SUCCESS",))
    verdicts = TrajectoryJudge(backend, votes=3).judge([request, request], seed=0)
    assert [(v.reward, v.abstained, v.votes) for v in verdicts] == [(1.0, False, (1.0, 1.0, 1.0))] * 2
    assert backend.calls == [("judge", 6)]  # all votes of a batch in one call
    with pytest.raises(ValueError, match="vote_temperature"):
        TrajectoryJudge(backend, votes=2, vote_temperature=0.0)


def test_dream_reward_is_withheld_and_flagged_when_the_judge_abstains(start_file):  # noqa: F811
    env = dream(start_file, GuardBackend(("SUCCESS", "FAILURE")), judge_votes=2)
    _, reward, terminated, _, info = env.step("stop [ONE]")
    assert (reward, terminated, info["judge_abstained"], info["judge_votes"]) == (0.0, True, True, [1.0, 0.0])
    env = dream(start_file, GuardBackend(("SUCCESS",)), judge_votes=2)
    _, reward, _, _, info = env.step("stop [ONE]")
    assert (reward, info["judge_abstained"]) == (1.0, False)


# --- world-model uncertainty ---------------------------------------------------------------------


def test_disagreeing_samples_cut_the_dream_without_a_judge_call(start_file):  # noqa: F811
    backend = GuardBackend(terminal_rows={0})  # of 2 samples, only the first ends the episode
    env = dream(start_file, backend, world_model_samples=2, uncertainty="cut")
    _, reward, terminated, truncated, info = env.step("click [14]")
    assert (reward, terminated, truncated, info["end_reason"]) == (0.0, False, True, "uncertain")
    assert info["world_model_disagreement"] and backend.calls == [("wm", 2)]


@pytest.mark.parametrize(("mode", "expected"), [("no_reward", 0.0), ("discount", 0.25)])
def test_disagreeing_samples_withhold_or_discount_the_reward(start_file, mode, expected):  # noqa: F811
    backend = GuardBackend(terminal_rows={0})
    env = dream(start_file, backend, world_model_samples=2, uncertainty=mode, uncertainty_discount=0.25)
    _, reward, terminated, _, info = env.step("click [14]")  # the first sample is the step: it ends the dream
    assert (reward, terminated, info["world_model_uncertain_steps"]) == (expected, True, 1)
    agreeing = dream(start_file, GuardBackend(), world_model_samples=2, uncertainty=mode)
    _, reward, _, _, info = agreeing.step("click [14]")
    assert reward == 1.0 and "world_model_disagreement" not in info


def test_page_disagreement_counts_only_with_disagreement_on_page():
    guards = RewardGuards(world_model_samples=2)
    world_model = WebWorldModel(GuardBackend(terminal_rows={0, 1}))
    request = WorldModelRequest("g", "file:///c.html", "RootWebArea 'c'\n\t[13] button 'ONE'", "click [13]")
    (samples,) = world_model.predict_samples([request], 2, seed=0)
    assert len(samples) == 2 and not guards.samples_disagree(samples)
    other = samples[1].__class__(**{**samples[1].__dict__, "axtree": "RootWebArea 'other'"})
    assert not guards.samples_disagree([samples[0], other])
    assert RewardGuards(disagreement_on="page").samples_disagree([samples[0], other])


# --- progress reward ------------------------------------------------------------------------------


def form_dream(start_file, backend, **guards) -> DreamWebEnv:  # noqa: F811
    env = DreamWebEnv(world_model=backend, judge="world_model", start_states=start_file, dream_length=3,
                      reward_guards=guards)  # fmt: skip
    env.reset(seed=0, options={"task": "miniwob.enter-text", "task_seed": 3})
    return env


def test_progress_reward_pays_an_unpaid_dream_for_the_requirements_it_met(start_file):  # noqa: F811
    # 'Enter "Kay" and press Submit.': typing Kay meets one of its two requirements; a stray click meets none.
    rewards = {}
    for name, actions in (("typed", ["type [5] [Kay] [0]"]), ("stray", ["click [5]"]), ("none", [])):
        env = form_dream(start_file, GuardBackend(("FAILURE",)), progress_reward=0.4)
        for action in actions:
            env.step(action)
        _, rewards[name], terminated, _, info = env.step("stop [N/A]")
        assert terminated and info["judge_reward"] == 0.0
    assert rewards == {"typed": pytest.approx(0.2), "stray": 0.0, "none": 0.0}
    assert RewardGuards(progress_reward=0.4).active == ["objective_check", "progress_reward"]
    env = form_dream(start_file, GuardBackend(("FAILURE",)))  # off by default: the judge's 0 stands
    env.step("type [5] [Kay] [0]")
    _, reward, _, _, info = env.step("stop [N/A]")
    assert reward == 0.0 and "objective_progress" not in info
    split = form_dream(start_file, GuardBackend(("SUCCESS", "FAILURE")), judge_votes=2, progress_reward=0.4)
    split.step("type [5] [Kay] [0]")
    _, reward, _, _, info = split.step("stop [N/A]")  # an abstaining judge pays nothing, progress included
    assert (reward, info["judge_abstained"]) == (0.0, True) and "objective_progress" not in info
    paid = form_dream(start_file, GuardBackend(("SUCCESS",)), progress_reward=0.4)  # a paid SUCCESS outranks it
    paid.step("type [5] [Kay] [0]")
    paid.step("click [7]")
    _, reward, _, _, info = paid.step("stop [N/A]")
    assert reward == 1.0 and "objective_progress" not in info


def test_a_gated_dream_that_goes_on_is_paid_its_progress_only_when_it_ends(start_file):  # noqa: F811
    env = dream(start_file, GuardBackend(("FAILURE",)), gate_termination=True, progress_reward=0.4)
    _, reward, terminated, _, _ = env.step("click [13]")  # the objective's ONE: progress 1.0, not terminal
    assert (reward, terminated) == (0.0, False)
    _, reward, terminated, truncated, info = env.step("click [14]")  # terminal, judged FAILURE: gated, goes on
    assert (reward, terminated, truncated, info["termination_gated"]) == (0.0, False, False, True)
    assert "objective_progress" not in info
    _, reward, terminated, truncated, info = env.step("click [14]")  # gated again, at dream_length: ends
    assert (reward, terminated, truncated, info["end_reason"]) == (pytest.approx(0.4), False, True, "dream_length")
    assert info["objective_progress"] == 1.0


# --- gated early termination ---------------------------------------------------------------------


def test_a_terminal_page_the_judge_rejects_does_not_end_the_dream(start_file):  # noqa: F811
    backend = GuardBackend(("FAILURE",))
    env = dream(start_file, backend, gate_termination=True)
    observation, reward, terminated, truncated, info = env.step("click [14]")
    assert (reward, terminated, truncated, info["termination_gated"]) == (0.0, False, False, True)
    assert "end_reason" not in info and "[14] button 'TWO', focused" in observation["axtree"]
    env.step("click [14]")  # the dream goes on; at dream_length it ends truncated with reward 0
    _, reward, terminated, truncated, info = env.step("click [14]")
    assert (reward, terminated, truncated, info["end_reason"]) == (0.0, False, True, "dream_length")
    accepted = dream(start_file, GuardBackend(("SUCCESS",)), gate_termination=True)
    _, reward, terminated, _, info = accepted.step("click [14]")
    assert (reward, terminated, info["end_reason"]) == (1.0, True, "terminal_state")


def test_vector_env_takes_the_same_guards(start_file):  # noqa: F811
    backend = GuardBackend(("FAILURE",))
    env = DreamWebVectorEnv(
        2, world_model=backend, judge="world_model", start_states=start_file, reward_guards={"gate_termination": True}
    )
    env.reset(seed=0, options={"task": "miniwob.click-button"})
    _, rewards, terminated, truncated, info = env.step(["click [14]", "click [13]"])
    assert terminated.tolist() == [False, False] and rewards.tolist() == [0.0, 0.0]
    assert info["termination_gated"][0] and info["_termination_gated"].tolist() == [True, False]


def test_world_model_retries_reach_the_world_model_a_dream_uses(start_file):  # noqa: F811
    env = dream(start_file, GuardBackend(), world_model_retries=2)
    assert env.dynamics.world_model.invalid_retries == 2
    given = WebWorldModel(GuardBackend())
    env = DreamWebEnv(world_model=given, start_states=start_file, reward_guards={"world_model_retries": 1})
    assert env.dynamics.world_model.invalid_retries == 1 and given.invalid_retries == 0  # a copy, not the caller's


# --- prompt styles -------------------------------------------------------------------------------


def test_compact_prompts_are_short_and_keep_the_output_format():
    request = WorldModelRequest("g", "file:///c.html", "RootWebArea 'c'", "click [13]")
    paper = WebWorldModel(GuardBackend()).build_messages(request)
    compact = WebWorldModel(GuardBackend(), prompt_style="compact").build_messages(request)
    assert compact[0]["content"] == COMPACT_WORLD_MODEL_SYSTEM_PROMPT and compact[1] == paper[1]
    assert len(compact[0]["content"]) * 5 < len(paper[0]["content"])
    patch = WebWorldModel(GuardBackend(), output_mode="patch", prompt_style="compact").build_messages(request)
    assert PATCH_HEADER in patch[0]["content"] and "REMOVE [id]" in patch[0]["content"]
    for success in (True, False):
        verdict = parse_judge_output(format_judge_target(success, "compact"))
        assert verdict.error is None and verdict.reward == float(success)
    with pytest.raises(ValueError, match="prompt_style"):
        WebWorldModel(GuardBackend(), prompt_style="short")


def test_trained_models_are_prompted_in_the_style_they_were_trained_on(tmp_path, monkeypatch):
    recorded = {
        name: json.loads((adapter.path / WORLD_MODEL_INFO_FILE).read_text()).get("prompt_style", "paper")
        for name, adapter in SHIPPED_ADAPTERS.items()
    }
    assert {name: model_prompt_style(name) for name in SHIPPED_ADAPTERS} == recorded  # as each was trained
    assert recorded["smollm2-135m-judge"] == "compact"  # the judge retrained on the large data
    assert recorded[TRAINED_JUDGE] == "grounded"  # its DAgger successor, the default judge
    assert model_prompt_style("smollm2-135m") == "paper"  # a prompted model
    (tmp_path / WORLD_MODEL_INFO_FILE).write_text(json.dumps({"output_mode": "tree", "prompt_style": "compact"}))
    assert model_prompt_style(tmp_path) == "compact"
    monkeypatch.setattr("dynaweb_env.llm.make_backend", lambda spec: GuardBackend())
    dynamics = build_dynamics(str(tmp_path), "world_model", 3, 0.7, 16, 16, 100, reward_guards={"judge_votes": 3})
    assert dynamics.world_model.prompt_style == "compact" and dynamics.judge.prompt_style == "compact"
    assert dynamics.judge.votes == 3
    shipped = build_dynamics("smollm2-135m-wm", "smollm2-135m-judge", 3, 0.7, 16, 16, 100)
    assert shipped.world_model.prompt_style == recorded["smollm2-135m-wm"] and shipped.judge.prompt_style == "compact"
    assert build_dynamics("smollm2-135m-wm", TRAINED_JUDGE, 3, 0.7, 16, 16, 100).judge.prompt_style == "grounded"


# --- real models: the shipped world model and judge on shipped start pages ------------------------

REAL = {"world_model": "smollm2-135m-wm", "judge": "smollm2-135m-judge", "max_new_tokens": 384}


@pytest.mark.slow
def test_real_judge_votes_are_counted_and_abstain_only_on_a_split():
    env = gym.make("DreamWeb-v0", reward_guards={"judge_votes": 4}, **REAL).unwrapped
    outcomes = []
    for seed in range(3):
        env.reset(seed=seed, options={"task": "miniwob.click-button"})
        _, reward, terminated, _, info = env.step("stop [done]")
        votes = info["judge_votes"]
        assert terminated and len(votes) == 4 and set(votes) <= {0.0, 1.0}
        assert info["judge_abstained"] == (len(set(votes)) > 1)
        assert reward == (0.0 if info["judge_abstained"] else votes[0])
        outcomes.append(info["judge_abstained"])
    assert len(outcomes) == 3


@pytest.mark.slow
def test_real_world_model_samples_agree_when_greedy_and_cut_when_they_disagree():
    state = {"task": "miniwob.click-checkboxes", "step_index": 0}
    greedy = gym.make(
        "DreamWeb-v0", world_model_temperature=0.0, dream_length=3, **REAL,
        reward_guards={"world_model_samples": 2, "disagreement_on": "page"},
    ).unwrapped  # fmt: skip
    observation, _ = greedy.reset(seed=0, options=state)
    element = sorted(axtree_element_ids(observation["axtree"]))[1]
    _, _, _, truncated, info = greedy.step(f"click [{element}]")
    assert "world_model_disagreement" not in info and info.get("end_reason") != "uncertain"
    sampled = gym.make(
        "DreamWeb-v0", world_model_temperature=1.0, dream_length=3, **REAL,
        reward_guards={"world_model_samples": 3, "disagreement_on": "page", "uncertainty": "cut"},
    ).unwrapped  # fmt: skip
    sampled.reset(seed=0, options=state)
    _, reward, terminated, truncated, info = sampled.step(f"click [{element}]")
    disagreed = info.get("world_model_disagreement", False)
    assert (info.get("end_reason") == "uncertain") == disagreed and truncated == disagreed
    assert not disagreed or (reward == 0.0 and not terminated)


@pytest.mark.slow
def test_real_gate_lets_a_terminal_page_end_the_dream_only_with_a_success_verdict():
    # Greedy pages: with sampled ones, whether the world model ends a page depended on what ran before in the process
    # (a test run of all three real tests once saw no ending in three seeds, so the gate went untested).
    env = gym.make(
        "DreamWeb-v0", dream_length=2, reward_guards={"gate_termination": True}, world_model_temperature=0, **REAL
    ).unwrapped
    proposed = 0
    for seed in range(3):
        observation, _ = env.reset(seed=seed, options={"task": "miniwob.click-button"})
        goal_word = observation["goal"].split('"')[1]
        button = next(line for line in observation["axtree"].splitlines() if f"button '{goal_word}'" in line)
        _, reward, terminated, truncated, info = env.step(f"click [{button.split('[')[1].split(']')[0]}]")
        proposed += info.get("termination_gated", False) or info.get("end_reason") == "terminal_state"
        if terminated:  # the world model ended the dream, and the gate let it: the judge said SUCCESS
            assert info["end_reason"] == "terminal_state" and reward == 1.0
        elif info.get("termination_gated"):
            assert reward == 0.0 and not truncated and "end_reason" not in info
    assert proposed, "the shipped world model never declared a click-button page finished: the gate went untested"
