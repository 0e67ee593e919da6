"""Planning with the world model (issue 53): the judge's probability of SUCCESS, the planner's candidates and choice,
``dynaweb eval --plan``, and RealWeb-v0's lookahead guard."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.agent import format_policy_response, policy_system_prompt
from dynaweb_env.envs.lookahead import ImaginedOutcome, Lookahead
from dynaweb_env.envs.lookahead_guard import GUARD_REFUSAL, LookaheadGuard, guard_refusal
from dynaweb_env.llm.base import Generation, SamplingParams
from dynaweb_env.models import resolve_model
from dynaweb_env.observation import make_observation
from dynaweb_env.world_model.judge import parse_judge_output, success_probability
from dynaweb_trainer.encoding import EpisodeEncoder
from dynaweb_trainer.planning import PlanningPolicy
from dynaweb_trainer.policy import PolicyTurn, ScriptedPolicy

TREE = "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"
GOAL = 'Click on the "ONE" button.'
URL = "file:///miniwob/click-button.html"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))


@pytest.fixture(scope="module")
def encoder(tokenizer):
    return EpisodeEncoder(tokenizer, policy_system_prompt("compact"), 1500)


def _verdict_generation(tokenizer, text: str, decisive: float) -> Generation:
    """``text`` as a judge's generation whose verdict word's first token had probability ``decisive``."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    word = text.rindex(text.split()[-1])
    first = next(i for i in range(len(ids)) if len(tokenizer.decode(ids[: i + 1])) > word)
    logprobs = [math.log(decisive) if i == first else -0.01 for i in range(len(ids))]
    return Generation(text, [1], ids, logprobs)


def test_success_probability_reads_the_token_that_decided_the_verdict(tokenizer):
    success = _verdict_generation(tokenizer, "VERDICT: SUCCESS", 0.8)
    failure = _verdict_generation(tokenizer, "REASONING: no.\n\nVERDICT: FAILURE", 0.9)
    assert success_probability(success, parse_judge_output(success.text), tokenizer) == pytest.approx(0.8)
    assert success_probability(failure, parse_judge_output(failure.text), tokenizer) == pytest.approx(0.1)
    # No log-probs, no tokenizer, or no verdict: no probability (the 0/1 verdict is all there is).
    bare = Generation("VERDICT: SUCCESS")
    assert success_probability(bare, parse_judge_output(bare.text), tokenizer) is None
    assert success_probability(success, parse_judge_output(success.text), None) is None
    unreadable = Generation("maybe", [1], [5], [-0.1])
    assert success_probability(unreadable, parse_judge_output("maybe"), tokenizer) is None


class _Buttons(ScriptedPolicy):
    """Answers ``greedy`` when decoding greedily, else the next of ``samples`` (a policy whose samples differ)."""

    def __init__(self, tokenizer, greedy: str, samples: list[str]):
        super().__init__(tokenizer)
        self.greedy, self.samples, self.sampling = greedy, list(samples), False

    def act(self, turns, sampling):
        self.sampling = not sampling.greedy
        return super().act(turns, sampling)

    def respond(self, turn):
        action = self.samples.pop(0) if self.sampling and self.samples else self.greedy
        return format_policy_response("a button", action)


class _Scores:
    """A lookahead double for the planner's choice alone: each dreamed first action scores as ``scores`` says."""

    depth = 1

    def __init__(self, scores: dict[str, float | None]):
        self.scores, self.asked = scores, []

    def begin(self, starts):
        return [type("Dream", (), {"done": False, "num_steps": 1, "last_action": ""})() for _ in starts]

    def step(self, episodes, actions, seed=None):
        for episode, action in zip(episodes, actions, strict=True):
            episode.last_action = action.split("ACTION: ")[-1]
        self.asked.append([episode.last_action for episode in episodes])
        return [{} for _ in episodes]

    def score(self, episodes, first, seed=None):
        return [ImaginedOutcome(self.scores[e.last_action], None, True, "stop", False, "", URL, 1) for e in episodes]


def _turn(encoder):
    observation = make_observation(GOAL, URL, TREE, "", "")
    options = {"task": "miniwob.click-button", "task_seed": 1}
    return PolicyTurn(observation, {"task_id": "miniwob.click-button"}, encoder.start(observation), options)


def test_the_planner_dedups_candidates_and_keeps_the_policys_answer_on_a_tie(tokenizer, encoder):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=32, seed=1)
    policy = _Buttons(tokenizer, "click [14]", ["click [14]", "click [13]", "not an action"])
    lookahead = _Scores({"click [13]": 0.7, "click [14]": 0.2})
    planner = PlanningPolicy(policy, encoder, lookahead, num_candidates=4)  # type: ignore[arg-type]
    (chosen,) = planner.act([_turn(encoder)], greedy)
    # The repeated sample and the unreadable one are dropped: two candidates, dreamed in one call, the better runs.
    assert lookahead.asked == [["click [14]", "click [13]"]] and chosen.text.endswith("click [13]")
    assert planner.plans[-1]["reason"] == "best imagined future" and planner.stats.chose_other == 1
    # All tied: the policy's own answer runs.
    policy.samples = ["click [13]"]
    lookahead.scores = {"click [13]": 0.4, "click [14]": 0.4}
    (chosen,) = planner.act([_turn(encoder)], greedy)
    assert chosen.text.endswith("click [14]") and planner.plans[-1]["reason"].startswith("all tied")
    # One candidate (the samples repeat the answer): nothing is dreamed.
    policy.samples = ["click [14]"] * 3
    planner.act([_turn(encoder)], greedy)
    assert len(lookahead.asked) == 2 and planner.plans[-1]["reason"] == "single candidate"
    with pytest.raises(ValueError, match="num_candidates"):
        PlanningPolicy(policy, encoder, lookahead, num_candidates=1)  # type: ignore[arg-type]


@pytest.mark.slow  # ~50 CPU-seconds: loading the shipped world model and judge, and one call of each
def test_the_planner_with_the_shipped_world_model_and_judge_clicks_the_right_button(tokenizer, encoder):
    """The real shipped world model dreams both clicks, the real trained judge scores them: ONE wins over TWO."""
    policy = _Buttons(tokenizer, "click [14]", ["click [13]"])
    planner = PlanningPolicy(policy, encoder, Lookahead(depth=1, max_new_tokens=160), num_candidates=2)
    (chosen,) = planner.act([_turn(encoder)], SamplingParams(temperature=0.0, max_new_tokens=32, seed=0))
    candidates = planner.plans[-1]["candidates"]
    assert [c["action"] for c in candidates] == ["click [14]", "click [13]"]
    assert all(0 < c["success_probability"] < 1 for c in candidates)
    assert candidates[1]["success_probability"] > candidates[0]["success_probability"]
    assert chosen.text.endswith("click [13]")
    cost = planner.stats.to_dict(planner.lookahead)
    assert cost["world_model_calls"] == cost["judge_calls"] == 1 and cost["per_real_step"]["world_model_tokens"] > 0


def test_guard_refuses_leaving_the_task_and_a_dreamed_failure_only():
    leaves = ImaginedOutcome(None, None, False, "", True, "", "about:blank", 1)
    fails = ImaginedOutcome(0.1, 0.0, True, "terminal_state", False, "", URL, 1)
    succeeds = ImaginedOutcome(0.8, 1.0, True, "terminal_state", False, "", URL, 1)
    unfinished = ImaginedOutcome(0.05, 0.0, False, "", False, "", URL, 1)
    unjudged = ImaginedOutcome(None, None, True, "stop", False, "judge: down", URL, 1)
    assert "leaves" in guard_refusal(leaves) and "failure" in guard_refusal(fails)
    assert guard_refusal(succeeds) == guard_refusal(unfinished) == guard_refusal(unjudged) == ""
    assert guard_refusal(succeeds, threshold=0.9) != ""


@pytest.mark.usefixtures("require_browser")
def test_realweb_lookahead_guard_refuses_leaving_the_task_page():
    """``new_tab`` ends a MiniWoB++ task in failure; with the guard it is refused (no model is needed to see it)."""
    env = gym.make("RealWeb-v0", task="miniwob.click-button", lookahead_guard=True)
    try:
        assert any(isinstance(layer, LookaheadGuard) for layer in _layers(env))
        observation, _ = env.reset(seed=0, options={"task_seed": 3})
        after, reward, terminated, truncated, info = env.step("new_tab")
        assert after["last_action_error"].startswith(f"{GUARD_REFUSAL} new_tab")
        assert (reward, terminated, truncated) == (0.0, False, False) and info["lookahead_guard"]["refused"]
        assert after["axtree"] == observation["axtree"] and after["url"] == observation["url"]
    finally:
        env.close()
    with pytest.raises(ValueError, match="lookahead_guard"):
        gym.make("RealWeb-v0", lookahead_guard="yes")


def _layers(env):
    while True:
        yield env
        if not hasattr(env, "env"):
            return
        env = env.env


def test_eval_config_takes_the_planning_flags():
    from dynaweb_trainer.evaluate import EvalConfig, parse_config
    from dynaweb_trainer.planning import DEFAULT_PROGRESS_WEIGHT

    assert EvalConfig().plan_progress_weight == DEFAULT_PROGRESS_WEIGHT  # the measured default, defined once

    config = parse_config(
        ["--plan", "4", "--plan-depth", "2", "--plan-temperature", "0.8", "--plan-progress-weight", "0.5"]
    )
    assert (config.plan, config.plan_depth, config.plan_temperature, config.plan_progress_weight) == (4, 2, 0.8, 0.5)
    bads = ({"plan": 1}, {"plan": -2}, {"plan": 2, "plan_depth": 0}, {"plan": 2, "plan_temperature": 0.0},
            {"plan": 2, "plan_progress_weight": 1.0})  # fmt: skip
    for bad in bads:
        with pytest.raises(ValueError, match="plan"):
            EvalConfig(**bad)


def test_progress_lifts_only_an_unfinished_dream_and_never_above_an_ended_success():
    from dynaweb_env.envs.lookahead import ImaginedOutcome
    from dynaweb_trainer.planning import pick, score

    def outcome(probability, ended, progress):
        return ImaginedOutcome(probability, float(probability > 0.5), ended, "stop" if ended else "", False, "", "u",
                               1, progress)  # fmt: skip

    typed_username = outcome(0.002, False, 0.5)  # the right first step of a login: not ended, judged unfinished
    stray_submit = outcome(0.3, True, 0.0)  # a stray action whose dream ended
    assert score(typed_username) < score(stray_submit)  # the judge alone prefers the stray action
    assert score(typed_username, 0.75) == pytest.approx(0.375)
    assert score(typed_username, 0.75) > score(stray_submit, 0.75)
    assert score(outcome(0.1, True, 1.0), 0.75) == pytest.approx(0.1)  # an ended dream is the judge's alone
    assert score(outcome(0.2, False, None), 0.75) == pytest.approx(0.2)  # no stated requirements: no floor
    assert score(outcome(0.99, True, 1.0), 0.75) > score(outcome(0.0, False, 1.0), 0.75)
    assert pick([score(typed_username, 0.75), score(stray_submit, 0.75)], own=1, tie_margin=1e-6) == 0
    with pytest.raises(ValueError, match="progress_weight"):
        from dynaweb_trainer.planning import PlanningPolicy

        PlanningPolicy(None, None, None, 2, progress_weight=1.0)
