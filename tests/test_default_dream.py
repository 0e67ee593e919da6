"""DreamWeb-v0's defaults (issue 48): the trained judge, start states of every task, an honest ``judged``, and one
load per model per process."""

from __future__ import annotations

import json
import os
import threading

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.shipped import LARGE_DATA_DIR
from dynaweb_env.data.start_states import load_start_states
from dynaweb_env.data.tasks import TASK_SUITES
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.envs.dream_setup import WORLD_MODEL_JUDGE, build_dynamics, resolve_judge
from dynaweb_env.llm import make_backend
from dynaweb_env.llm.base import Generation
from dynaweb_env.models import (
    ALL_TASKS_JUDGE,
    DEFAULT_JUDGE,
    DEFAULT_WORLD_MODEL,
    TRAINED_JUDGE,
    default_judge,
    model_prompt_style,
)
from dynaweb_env.shipped_models import trained_judge_tasks

TREE = "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"


# --- the trained judge is the default ------------------------------------------------------------------


def test_the_trained_judge_is_the_default_and_the_world_model_judges_only_by_name():
    assert DEFAULT_JUDGE == TRAINED_JUDGE == resolve_judge(None)
    assert resolve_judge(WORLD_MODEL_JUDGE) is None and resolve_judge("world-model") is None
    assert resolve_judge("smollm2-135m-judge") == "smollm2-135m-judge"


def test_every_host_defaults_to_the_trained_judge(monkeypatch):
    from dynaweb_trainer.config import GSPOConfig
    from dynaweb_trainer.dream_demo import DreamDemoConfig

    assert GSPOConfig(output_dir="/tmp/unused").judge is None  # DreamWeb-v0's default for the run's tasks
    assert DreamDemoConfig().judge == DEFAULT_JUDGE
    # gym.make, make_vec and every integration (they call gym.make without a judge): the judge is built from
    # DEFAULT_JUDGE, prompted in its own style. The backend is recorded instead of loaded (the specs are the point).
    built = []
    monkeypatch.setattr("dynaweb_env.llm.make_backend", lambda spec, **kw: built.append(spec) or _Verdicts())
    for env in (gym.make("DreamWeb-v0").unwrapped, gym.make_vec("DreamWeb-v0", num_envs=2)):
        judge = env.dynamics.judge
        assert built[-1] == DEFAULT_JUDGE and judge.prompt_style == model_prompt_style(DEFAULT_JUDGE) == "grounded"
    assert build_dynamics(None, "world_model", 3, 0.7, 16, 16, 100).judge.backend is not None
    assert built[-1] == DEFAULT_WORLD_MODEL  # "world_model": the world model's backend judges


def test_the_default_judge_is_the_trained_judge_of_the_tasks():
    """Long tasks (which the DAgger judge never trained on, 0.84 on their 122 held-out cases) get the all-tasks
    judge (0.96, ``benchmarks/results/judge/judge_dagger_long_time_rule.json``); the 24 tasks keep the DAgger one."""
    assert default_judge(None) == default_judge(TASK_SUITES["small"]) == default_judge(TASK_SUITES["multistep"])
    assert default_judge(None) == DEFAULT_JUDGE and set(TASK_SUITES["multistep"]) <= trained_judge_tasks()
    assert default_judge(TASK_SUITES["long"]) == ALL_TASKS_JUDGE
    assert default_judge(["miniwob.click-button", "miniwob.book-flight"]) == ALL_TASKS_JUDGE  # one unseen task
    assert resolve_judge(None, ["miniwob.use-slider-2"]) == ALL_TASKS_JUDGE
    assert resolve_judge("smollm2-135m-judge", ["miniwob.use-slider-2"]) == "smollm2-135m-judge"  # named: kept


def test_dreams_and_lookahead_of_long_tasks_load_the_all_tasks_judge(monkeypatch):
    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
    from dynaweb_env.envs.lookahead import Lookahead

    built = []
    monkeypatch.setattr("dynaweb_env.llm.make_backend", lambda spec, **kw: built.append(spec) or _Verdicts())
    start_states = str(ALL_TASKS_DATA_DIR / "test")
    env = gym.make("DreamWeb-v0", start_states=start_states, tasks=["miniwob.book-flight"]).unwrapped
    assert env.dynamics.judge.prompt_style == "grounded" and built[-1] == ALL_TASKS_JUDGE
    _ = gym.make("DreamWeb-v0", start_states=start_states, tasks=["miniwob.click-button"]).unwrapped.dynamics.judge
    assert built[-1] == DEFAULT_JUDGE
    _ = Lookahead(tasks=["miniwob.choose-date"]).dynamics.judge
    assert built[-1] == ALL_TASKS_JUDGE
    _ = Lookahead().dynamics.judge
    assert built[-1] == DEFAULT_JUDGE
    # RealWeb-v0's lookahead guard plans on its env's task (no browser starts before reset)
    guard = gym.make("RealWeb-v0", task="miniwob.book-flight", lookahead_guard=True)
    _ = guard.get_wrapper_attr("lookahead").dynamics.judge
    assert built[-1] == ALL_TASKS_JUDGE
    guard.close()


# --- an honest judged --------------------------------------------------------------------------------------


class _Verdicts:
    """World model: ``page`` (``TREE``) whatever the action. Judge: ``texts`` in turn (``"VERDICT: SUCCESS"`` by
    default)."""

    def __init__(self, *texts: str, page: str = TREE):
        self.texts, self.page = list(texts), page

    def generate(self, conversations, params):
        out = []
        for conversation in conversations:
            if "VERDICT" in conversation[0]["content"]:
                text = self.texts.pop(0) if self.texts else "VERDICT: SUCCESS"
                out.append(Generation(text, finish_reason="length" if text.endswith("...") else "stop"))
            else:
                out.append(Generation(f"[Web state changes]\nnothing\n[Next page accessibility tree]\n{self.page}"))
        return out


@pytest.fixture()
def start_file(tmp_path):
    from dynaweb_env.data.io import write_trajectories
    from dynaweb_env.data.schema import Step, Trajectory

    steps = [Step("file:///click.html", TREE, "click [13]"), Step("file:///click.html", TREE, "")]
    trajectory = Trajectory("t", "miniwob.click-button", 'Click "ONE".', "expert", steps, True, 1.0)
    write_trajectories(tmp_path / "start.jsonl", [trajectory])
    return str(tmp_path / "start.jsonl")


def test_a_judge_output_without_a_verdict_is_reported_as_none(start_file):
    backend = _Verdicts("I think the agent clicked...", "VERDICT: FAILURE")
    env = DreamWebEnv(world_model=backend, judge=backend, start_states=start_file)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("stop [ONE]")
    assert terminated and reward == 0.0 and info["judged"] is False
    assert info["judge_error"].startswith("no 'VERDICT") and "token limit" in info["judge_error"]
    env.reset(seed=0)
    _, reward, _, _, info = env.step("stop [ONE]")
    assert reward == 0.0 and info["judged"] is True and info["judge_error"] == ""  # a verdict of 0


def test_training_metrics_count_dreams_without_a_verdict():
    from dynaweb_trainer.metrics import environment_reward

    logged = {}
    environment_reward(
        prompts=[""] * 4, completions=[""] * 4, reward=[0.0, 1.0, 0.0, 1.0],
        source=["dream", "dream", "dream", "expert"], judge_error=[True, False, False, False],
        log_metric=logged.__setitem__,
    )  # fmt: skip
    assert logged["env/judge_error_rate"] == pytest.approx(1 / 3)  # of the dreams only


# --- start states of every task, read once ---------------------------------------------------------------


def test_default_start_states_cover_every_task_the_world_model_learned():
    tasks = json.loads((LARGE_DATA_DIR / "MANIFEST.json").read_text())["tasks"]
    states = load_start_states()
    assert sorted({state.task_id for state in states}) == sorted(tasks) and len(tasks) == 24
    assert {state.task_seed % 5 for state in states} == {0, 1, 2}  # the train split only
    again = load_start_states()
    assert again == states and again is not states and again[0] is states[0]  # read once per process
    env = gym.make("DreamWeb-v0", tasks=["miniwob.use-autocomplete"]).unwrapped
    assert env.start_states[0] is next(s for s in states if s.task_id == "miniwob.use-autocomplete")


# --- one load per model per process ---------------------------------------------------------------------


def _rss_gb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def test_make_backend_builds_a_spec_once_across_threads():
    results = []

    def build():
        results.append(make_backend("tiny-random"))

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    built = {id(backend) for backend in results}
    assert len(built) == 1 and make_backend("tiny-random") is results[0]
    assert make_backend("tiny-random", cache=False) is not results[0]


def test_more_envs_reuse_the_loaded_models():
    """Ten envs built in one process load each model once: same backend objects, RSS within 0.25 GB of one env's.

    ``smollm2-135m`` (a 0.5 GB float32 model): a second load of it would show in the RSS."""
    kwargs = {"world_model": "smollm2-135m", "judge": "smollm2-135m", "tasks": ["miniwob.click-button"]}
    first = gym.make("DreamWeb-v0", **kwargs).unwrapped
    models = (first.dynamics.world_model.backend, first.dynamics.judge.backend)
    after_one = _rss_gb()
    envs = [gym.make("DreamWeb-v0", **kwargs).unwrapped for _ in range(9)]
    for env in envs:
        assert (env.dynamics.world_model.backend, env.dynamics.judge.backend) == models
    assert models[0] is models[1]  # one spec, one model: the world model's and the judge's
    assert _rss_gb() - after_one < 0.25


# --- the objective check (reward_guards.objective_check, on by default) --------------------------------------

FORM = "RootWebArea 'Enter Text Task', focused\n\t[14] textbox ''\n\t[15] button 'Submit', focused"
BOXES = "RootWebArea 'Boxes'\n\t[18] checkbox 'ab', checked='true'\n\t[21] checkbox 'cd', checked='false'\n" + (
    "\t[27] button 'Submit'"
)


def test_unmet_objective_finds_what_an_explicit_objective_left_undone():
    from dynaweb_env.world_model.requirements import unmet_objective

    goal = 'Enter "Briana" into the text field and press Submit.'
    submit = ["[15] button 'Submit'"]
    assert unmet_objective(goal, ["click [15]"], submit, FORM) == [
        "the objective's text 'Briana' is typed nowhere"
    ]  # a Submit on the empty form
    assert unmet_objective(goal, ["type [14] [briana] [0]", "click [15]"], ["[14] textbox ''", *submit], FORM) == []
    assert unmet_objective('Enter "b" and press Submit.', ["click [15]"], submit, FORM)  # "b" is not in "submit"
    assert unmet_objective('Click on the "Submit" button.', ["click [15]"], submit, FORM) == []  # it names an element
    boxes = unmet_objective("Select ab, cd and click Submit.", ["click [27]"], ["[27] button 'Submit'"], BOXES)
    assert boxes == ["checkbox 'cd', which the objective names, is not checked"]


INBOX = "\n".join([
    "RootWebArea 'Email Inbox Task', focused",
    "\t[16] heading 'Primary'",
    "\t[17] image ''",
    "\tStaticText 'Zabrina'", "\tStaticText 'Mi.'", "\t[26] image ''", "\t[27] image ''",
    "\tStaticText 'Simonette'", "\tStaticText 'Enim.'", "\t[36] image ''", "\t[37] image ''",
])  # fmt: skip


def test_unmet_objective_finds_an_icon_clicked_outside_the_row_the_objective_names():
    from dynaweb_env.observation import action_target, target_text_and_row
    from dynaweb_env.world_model.requirements import named_rows, unmet_objective

    goal = "Find the email by Zabrina and click the star icon to mark it as important."
    assert named_rows(INBOX, goal) == [("26", "image"), ("27", "image")]

    def unmet(element):
        target = action_target(f"click [{element}]", INBOX)
        return unmet_objective(goal, [f"click [{element}]"], [target], INBOX, [target_text_and_row(target, INBOX)])

    assert unmet(27) == []  # Zabrina's star
    assert unmet(17) == ["the icon acted on last ([17]) is in no row the objective names"]  # the search icon
    assert unmet(37) == ["the icon acted on last ([37]) is in no row the objective names"]  # Simonette's star
    stopped = unmet_objective(goal, ["click [17]", "stop [N/A]"], ["[17] image ''", ""], INBOX, [("", "")] * 2)
    assert stopped == unmet(17)  # a `stop` after the wrong icon acts on no element: the icon is still the last
    assert unmet_objective(goal, ["click [17]"], ["[17] image ''"], INBOX) == []  # no (text, row): not checked
    assert unmet_objective("Click the star icon.", ["click [17]"], ["[17] image ''"], INBOX, [("", "")]) == []


FILE_TREE = "\n".join([
    "RootWebArea 'Navigate Tree Task', focused",
    "\t[16] list ''",
    "\t\t[17] listitem ''", "\t\t\tStaticText 'Marcella'",
    "\t\t[19] listitem ''", "\t\t\t[20] generic, clickable=True", "\t\t\t[21] generic, clickable=True",
    "\t\t\t\tStaticText 'Leonie'",
    "\t\t[33] listitem ''", "\t\t\tStaticText 'Ignacio'",
])  # fmt: skip


def test_unmet_objective_finds_an_item_clicked_whose_text_the_objective_does_not_name():
    from dynaweb_env.observation import action_target, target_text_and_row
    from dynaweb_env.world_model.requirements import named_texts, unmet_objective

    goal = 'Navigate through the file tree. Find and click on the folder or file named "Marcella".'
    assert named_texts(FILE_TREE, goal) == [("17", "listitem")]

    def unmet(*elements):
        actions = [f"click [{element}]" for element in elements]
        targets = [action_target(action, FILE_TREE) for action in actions]
        return unmet_objective(goal, actions, targets, FILE_TREE, [target_text_and_row(t, FILE_TREE) for t in targets])

    assert unmet(17) == []  # Marcella
    assert unmet(21, 17) == []  # a folder opened on the way, then Marcella
    assert unmet(33) == ["the element acted on last ([33]) shows no text the objective names"]  # Ignacio
    assert unmet(21) == []  # a folder toggle last: no item of its role (generic) shows a named text, not checked
    menu = "RootWebArea 'Social'\n\t[106] list ''\n\t\t[110] listitem ''\n\t\t\tStaticText 'Mute @jerald'" + (
        "\n\t\t[111] listitem ''\n\t\t\tStaticText 'Block @jerald'"
    )
    block = 'For the user @jerald, click on the "Block" button.'
    for element, expected in (
        ("111", []),
        ("110", ["the element acted on last ([110]) shows no text the objective names"]),
    ):
        target = action_target(f"click [{element}]", menu)
        shown = [target_text_and_row(target, menu)]
        assert unmet_objective(block, [f"click [{element}]"], [target], menu, shown) == expected


def test_a_dream_that_clicks_the_wrong_row_s_icon_is_not_paid(start_file):
    backend = _Verdicts(page=INBOX)  # the inbox unchanged by any click; the judge says SUCCESS to everything
    inbox = {"task_id": "miniwob.email-inbox-important", "url": "file:///inbox.html", "axtree": INBOX,
             "goal": "Find the email by Zabrina and click the star icon to mark it as important."}  # fmt: skip
    env = DreamWebEnv(world_model=backend, judge=backend, start_states=start_file)
    for action, paid in (("click [27]", 1.0), ("click [37]", 0.0)):  # Zabrina's star, then Simonette's
        env.reset(seed=0, options={"start_state": inbox})
        env.step(action)
        _, reward, terminated, _, info = env.step("stop [done]")
        assert terminated and reward == paid and info["judged"]
    assert info["objective_unmet"] == ["the icon acted on last ([37]) is in no row the objective names"]


def test_unmet_objective_holds_on_the_shipped_real_trajectories():
    """Measured on every shipped real trajectory (``python -m benchmarks.objective_check`` counts the same): the
    check flags few successes and many failures, and so does its named-control rule alone."""
    from benchmarks.objective_check import summarise
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.shipped import real_trajectory_files

    report = summarise(read_trajectories(real_trajectory_files()))
    flagged = report["flagged"]
    assert report["trajectories"]["success"] > 1000 and flagged["any"]["success_share"] < 0.005
    assert flagged["any"]["failure_share"] > 0.25
    assert flagged["named_control"]["failures"] >= 20 and flagged["named_control"]["successes"] <= 1
    assert flagged["named_row"]["failures"] >= 5 and flagged["named_row"]["successes"] == 0
    assert flagged["named_text"]["failures"] >= 5 and flagged["named_text"]["successes"] == 0


def test_the_objective_check_withholds_a_success_by_default(start_file):
    backend = _Verdicts()  # the judge says SUCCESS to everything
    form = {"task_id": "miniwob.enter-text", "goal": 'Enter "Kay" and press Submit.', "url": "file:///f.html",
            "axtree": FORM}  # fmt: skip
    env = DreamWebEnv(world_model=backend, judge=backend, start_states=start_file)
    assert env.dynamics.guards.objective_check and env.dynamics.judge.objective_check
    env.reset(seed=0, options={"start_state": form})
    _, reward, _, _, info = env.step("stop [done]")  # nothing typed: the judge's SUCCESS is withheld
    assert reward == 0.0 and info["judged"] and info["objective_unmet"] and info["judge_reward"] == 0.0
    assert "withheld" in info["judge_reasoning"]
    env.reset(seed=0)  # 'Click "ONE".' on a page with button ONE: a stop that never clicked it is withheld
    _, reward, _, _, info = env.step("stop [ONE]")
    assert reward == 0.0 and info["objective_unmet"] == ["button 'ONE', which the objective names, was never acted on"]
    env.reset(seed=0, options={"start_state": {**form, "goal": "Close the page.", "axtree": TREE}})
    _, reward, _, _, info = env.step("stop [done]")  # an objective that names nothing on the page: nothing to check
    assert reward == 1.0 and "objective_unmet" not in info
    paper = DreamWebEnv(world_model=backend, judge=backend, start_states=start_file,
                        reward_guards={"objective_check": False})  # fmt: skip
    paper.reset(seed=0, options={"start_state": form})
    assert paper.step("stop [done]")[1] == 1.0
