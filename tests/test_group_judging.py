"""Group-relative judging (after ART's RULER) and ``reward_guards`` reaching the envs of ``dynaweb-train``."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import pytest
from test_dream_env import start_file  # noqa: F401  (fixture)
from test_reward_guards import GuardBackend

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.envs.dream_guards import RewardGuards
from dynaweb_env.envs.dream_vector import DreamWebVectorEnv
from dynaweb_env.llm.base import Generation, GenerationError
from dynaweb_env.world_model.group_judge import (
    GROUP_JUDGE_SYSTEM_PROMPT,
    GroupScores,
    build_group_messages,
    judge_groups,
    parse_group_scores,
)
from dynaweb_env.world_model.judge import JudgeRequest, JudgeStep, TrajectoryJudge
from dynaweb_trainer.cli import parse_train_args
from dynaweb_trainer.env_factory import make_vector_env
from dynaweb_trainer.rollout import EpisodeResult, _slot_info
from dynaweb_trainer.rollout_func import DynaWebRollout


def request(answer: str | None, goal: str = "Click ONE.") -> JudgeRequest:
    return JudgeRequest(goal, (JudgeStep("click [13]", "it is ONE", "[13] button 'ONE'"),), "file:///c.html",
                        "RootWebArea 'c'\n\t[13] button 'ONE'", answer)  # fmt: skip


class GroupBackend(GuardBackend):
    """``GuardBackend`` (world model, pointwise judge) that also answers group prompts with ``group_text``."""

    def __init__(self, verdicts=("SUCCESS",), group_text="ATTEMPT 1: SCORE 1\nATTEMPT 2: SCORE 0", fail=False):
        super().__init__(verdicts)
        self.group_text, self.fail, self.group_prompts = group_text, fail, []

    def generate(self, conversations, params):
        if self.fail:
            raise GenerationError("judge server down")
        if conversations[0][0]["content"] != GROUP_JUDGE_SYSTEM_PROMPT:
            return super().generate(conversations, params)
        self.calls.append(("group", len(conversations)))
        self.group_prompts.extend(conversation[1]["content"] for conversation in conversations)
        return [Generation(self.group_text) for _ in conversations]


# --- reading a listwise judgement ----------------------------------------------------------------


def test_group_scores_are_read_from_score_lines_in_any_order_and_markup():
    text = "REASONING: the second did less.\n\n**Attempt 2**: 0.25\nATTEMPT #1 - score: 1\nATTEMPT 3: SCORE .5"
    scores = parse_group_scores(text, 3)
    assert scores == GroupScores((1.0, 0.25, 0.5), None, text) and scores.ranks == (1, 3, 2)
    assert parse_group_scores("ATTEMPT 1: SCORE 0.2\nATTEMPT 1: SCORE 0.9", 1).scores == (0.9,)  # the last counts
    assert GroupScores((1.0, 1.0, 0.0)).ranks == (1, 1, 3)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no 'ATTEMPT"),
        (None, "no 'ATTEMPT"),
        ("VERDICT: SUCCESS", "no 'ATTEMPT"),
        ("ATTEMPT 1: SCORE 1", "missing [2]"),
        ("ATTEMPT 1: SCORE 1\nATTEMPT 2: SCORE 0\nATTEMPT 3: SCORE 1", "unknown [3]"),
        ("ATTEMPT 1: SCORE 7\nATTEMPT 2: SCORE 0", "outside [0, 1]"),
        ("ATTEMPT 1: SCORE -1\nATTEMPT 2: SCORE 0", "outside [0, 1]"),
        ("ATTEMPT 1: SCORE <a number from 0 to 1>\nATTEMPT 2: SCORE <a number from 0 to 1>", "no 'ATTEMPT"),
    ],
)
def test_an_unreadable_group_judgement_rewards_nobody(text, error):
    scores = parse_group_scores(text, 2)
    assert scores.scores == (0.0, 0.0) and error in scores.error


def test_the_group_prompt_shows_the_goal_once_and_every_attempt():
    (system, user) = build_group_messages([request("ONE"), request(None)], max_axtree_chars=2000)
    assert system["content"] == GROUP_JUDGE_SYSTEM_PROMPT
    assert user["content"].count("OBJECTIVE: Click ONE.") == 1 and "NUMBER OF ATTEMPTS: 2" in user["content"]
    assert "=== ATTEMPT 1 ===" in user["content"] and "=== ATTEMPT 2 ===" in user["content"]
    assert "AGENT ANSWER: ONE" in user["content"] and "AGENT ANSWER: None" in user["content"]
    with pytest.raises(ValueError, match="at least one"):
        build_group_messages([])


# --- scoring groups with one call -----------------------------------------------------------------


def test_votes_mode_scores_each_dream_by_its_share_of_success_votes_in_one_call():
    backend = GroupBackend(("SUCCESS", "FAILURE", "SUCCESS", "SUCCESS"))
    judge = TrajectoryJudge(backend, votes=4)
    scored = judge_groups(judge, [[request("ONE"), request("TWO")], [request("ONE")]], "votes", seed=0)
    assert [s.scores for s in scored] == [(0.75, 0.75), (0.75,)] and backend.calls == [("judge", 12)]


def test_listwise_mode_sends_one_prompt_per_group_in_one_call():
    backend = GroupBackend()
    judge = TrajectoryJudge(backend)
    scored = judge_groups(judge, [[request("ONE"), request("TWO")], [], [request("A"), request("B")]], "listwise")
    assert [s.scores for s in scored] == [(1.0, 0.0), (), (1.0, 0.0)] and backend.calls == [("group", 2)]
    garbled = judge_groups(TrajectoryJudge(GroupBackend(group_text="ATTEMPT 1: 1")), [[request("A"), request("B")]],
                           "listwise")  # fmt: skip
    assert garbled[0].scores == (0.0, 0.0) and "missing [2]" in garbled[0].error
    with pytest.raises(ValueError, match="votes' or 'listwise"):
        judge_groups(judge, [[request("A")]], "pairwise")


def test_group_judging_options_are_checked():
    guards = RewardGuards(judge_votes=3, group_judging="votes")
    assert guards.active == ["judge_votes", "group_judging", "objective_check"]
    for bad, message in (
        ({"group_judging": "rank"}, "group_judging must be one of"),
        ({"group_judging": "votes"}, "judge_votes >= 2"),
        ({"group_judging": "listwise", "judge_votes": 3}, "judge_votes=1"),
        ({"group_judging": "listwise", "gate_termination": True}, "cannot be combined"),
    ):
        with pytest.raises(ValueError, match=message):
            RewardGuards.parse(bad)


# --- in the env and in the rollout function -------------------------------------------------------


def dream_vector_env(start_file, backend, **guards) -> DreamWebVectorEnv:  # noqa: F811
    env = DreamWebVectorEnv(2, world_model=backend, judge="world_model", start_states=start_file, dream_length=3,
                            reward_guards=guards)  # fmt: skip
    env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": 1})
    return env


def test_the_env_defers_a_finished_dream_to_its_group(start_file):  # noqa: F811
    backend = GroupBackend()
    env = dream_vector_env(start_file, backend, group_judging="listwise")
    _, rewards, terminated, _, info = env.step(["stop [ONE]", "stop [TWO]"])
    assert rewards.tolist() == [0.0, 0.0] and terminated.tolist() == [True, True] and backend.calls == []
    infos = [_slot_info(info, i) for i in range(2)]
    assert all(item["judge_pending"] and not item["judged"] for item in infos)
    assert infos[0]["judge_request"]["answer"] == "ONE" and infos[0]["judge_request"]["goal"]
    skipped = {"judge_pending": False}  # e.g. a dream cut for world-model disagreement: not judged, reward 0
    (outcomes,) = env.judge_groups([[infos[0], skipped, infos[1]]], seed=0)
    assert [reward for reward, _ in outcomes] == [1.0, 0.0, 0.0] and backend.calls == [("group", 1)]
    assert outcomes[0][1]["group_rank"] == 1 and outcomes[0][1]["group_size"] == 2 and outcomes[1][1] == {}
    assert "ATTEMPT 2" in backend.group_prompts[0] and "ATTEMPT 3" not in backend.group_prompts[0]
    off = dream_vector_env(start_file, GroupBackend())
    with pytest.raises(ValueError, match="group_judging"):
        off.judge_groups([[infos[0]]])


def finished_dream(env: DreamWebVectorEnv, action: str) -> EpisodeResult:
    env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": 1})
    _, reward, _, _, info = env.step([action, action])
    final = _slot_info(info, 0)
    return EpisodeResult({}, None, float(reward[0]), False, 1, "dream", "miniwob.click-button", final_info=final)


def test_the_rollout_function_scores_each_prompts_dreams_as_one_group(start_file):  # noqa: F811
    backend = GroupBackend(("SUCCESS", "SUCCESS", "FAILURE"))
    env = dream_vector_env(start_file, backend, group_judging="votes", judge_votes=3)
    rollout = DynaWebRollout(SimpleNamespace(), None, vector_envs={"dream": env})
    results = [finished_dream(env, "stop [ONE]") for _ in range(3)]
    results.append(EpisodeResult({}, None, 1.0, True, 1, "expert"))
    rollout.judge_groups(["q1", "q2", "q1", "q1"], results, seed=0)
    assert [result.reward for result in results] == [pytest.approx(2 / 3)] * 3 + [1.0]
    assert [result.success for result in results] == [True, True, True, True]
    assert results[0].final_info["group_size"] == 2 and results[1].final_info["group_size"] == 1
    assert backend.calls[-1] == ("judge", 9)  # the 3 dreams of both groups, 3 votes each, in one call
    failing = [finished_dream(env, "stop [ONE]")]
    backend.fail = True
    rollout.judge_groups(["q"], failing, seed=0)
    assert failing[0].reward == 0.0 and "judge server down" in failing[0].final_info["backend_error"]


def test_dynaweb_train_passes_reward_guards_to_its_dream_envs(tmp_path):
    args = parse_train_args(["--reward-guards", '{"judge_votes": 3, "group_judging": "votes"}'])
    assert args.reward_guards == {"judge_votes": 3, "group_judging": "votes"}
    env = make_vector_env("dream", args, num_envs=2)
    assert env.dynamics.guards == RewardGuards(judge_votes=3, group_judging="votes") and not env.dynamics.models_loaded
    config = tmp_path / "run.yaml"
    config.write_text("reward_guards:\n  world_model_samples: 3\n  uncertainty: discount\n")
    args = parse_train_args(["--config", str(config)])
    expected = RewardGuards(world_model_samples=3, uncertainty="discount")
    assert make_vector_env("dream", args, 1).dynamics.guards == expected
    # The default (cpu-small) run dreams with the guards behind the best dreams-only result.
    default = parse_train_args([])
    best = RewardGuards(gate_termination=True, consistency="cut")
    assert default.reward_guards == {"gate_termination": True, "consistency": "cut"}
    assert make_vector_env("dream", default, 1).dynamics.guards == best
    paper = parse_train_args(["--reward-guards", "none"])
    assert paper.reward_guards is None and make_vector_env("dream", paper, 1).dynamics.guards == RewardGuards()
    for bad in ('{"judge_vote": 3}', "[1]", "{not json"):
        with pytest.raises(ValueError, match="reward_guards"):
            parse_train_args(["--reward-guards", bad])


# --- the shipped judge ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["votes", "listwise"])
def test_shipped_judge_scores_a_group_of_real_start_pages(mode):
    """The shipped trained judge on a group of 2 dreams of one shipped page: scores in [0, 1] or a flagged zero."""
    guards = {"group_judging": mode, **({"judge_votes": 3} if mode == "votes" else {})}
    env = gym.make_vec("DreamWeb-v0", num_envs=2, world_model="smollm2-135m-wm", judge="smollm2-135m-judge",
                       max_new_tokens=256, reward_guards=guards)  # fmt: skip
    observations, _ = env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": None})
    goal_word = observations["goal"][0].split('"')[1]
    button = next(line for line in observations["axtree"][0].splitlines() if f"button '{goal_word}'" in line)
    right = f"click [{button.split('[')[1].split(']')[0]}]"
    _, rewards, terminated, truncated, info = env.step([right, "stop [nothing done]"])
    finals = [_slot_info(info, i) for i in (0, 1)]
    pending = [item for item in finals if item.get("judge_pending")]
    assert rewards.tolist() == [0.0, 0.0] and pending, "no dream ended: the group judge went untested"
    (outcomes,) = env.judge_groups([pending], seed=0)
    for reward, update in outcomes:
        assert 0.0 <= reward <= 1.0 and update["group_size"] == len(pending)
        assert update["judge_error"] or reward == update["group_score"]
        assert not update["judge_error"] or reward == 0.0
    env.close()
