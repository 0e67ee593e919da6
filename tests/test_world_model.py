"""World model and judge: prompt, output format round trip, malformed outputs, batching, real models."""

from __future__ import annotations

import time

import pytest

from dynaweb_env.actions import ACTION_ARGUMENTS
from dynaweb_env.llm.base import Generation, SamplingParams
from dynaweb_env.world_model import (
    JudgeRequest,
    JudgeStep,
    TrajectoryJudge,
    WebWorldModel,
    WorldModelRequest,
    build_world_model_messages,
    format_world_model_target,
    parse_judge_output,
    parse_world_model_output,
)
from dynaweb_env.world_model.judge import build_judge_messages
from dynaweb_env.world_model.prompts import (
    WORLD_MODEL_ACTION_GROUPS,
    WORLD_MODEL_FORMAT_NOTES,
    WORLD_MODEL_SYSTEM_PROMPT,
)

CURRENT_URL = "file:///miniwob/click-button.html"
CURRENT_TREE = "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"
NEXT_TREE = "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE', focused\n\t[14] button 'TWO'"


class ScriptedBackend:
    """A GenerationBackend whose outputs come from a function of the conversation; counts calls.

    Unit tests of parsing and batching only: end-to-end behaviour is tested on real models below.
    """

    model_name = "scripted"

    def __init__(self, respond, finish_reason: str = "stop"):
        self.respond = respond
        self.finish_reason = finish_reason
        self.calls: list[tuple[list, SamplingParams]] = []

    def generate(self, conversations, params):
        self.calls.append((list(conversations), params))
        return [Generation(text=self.respond(conv), finish_reason=self.finish_reason) for conv in conversations]

    def generate_from_ids(self, prompt_ids, params):
        raise NotImplementedError


# --- prompt ----------------------------------------------------------------------------------


def test_system_prompt_is_the_papers_with_a_format_addendum():
    messages = build_world_model_messages("Click ONE.", CURRENT_URL, CURRENT_TREE, "click [13]")
    system = messages[0]["content"]
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
    assert system == WORLD_MODEL_SYSTEM_PROMPT + "\n\n" + WORLD_MODEL_FORMAT_NOTES
    for sentence in (
        "You are an intelligent agent that predicts next state from given current action in a web environment, "
        "with your own logical reasoning.",
        "[Web state changes]\n\nchanges\n\n[Next page accessibility tree]\n\nnext_acc_tree",
        "Note: Even if the web page does not change, you must still output the complete `next_acc_tree` !",
        "`go_forward`: Navigate to the next page (if a previous 'go_back' action was performed)",
    ):
        assert sentence in system


def test_prompt_describes_exactly_the_action_grammar():
    described = [name for _, actions in WORLD_MODEL_ACTION_GROUPS for name, _ in actions]
    assert described == list(ACTION_ARGUMENTS)[:12]  # the paper's grammar; select and the rest are read as strings
    for _, actions in WORLD_MODEL_ACTION_GROUPS:
        for name, description in actions:
            assert description.startswith(f"`{name}"), description


def test_user_message_layout_and_tree_budget():
    long_tree = "RootWebArea 'Long'\n" + "\n".join(f"\t[{i}] link 'item {i}'" for i in range(500))
    user = build_world_model_messages("Find it.", CURRENT_URL, long_tree, "scroll [down]", "click [3]", 600)[1]
    text = user["content"]
    assert text.startswith(f"OBJECTIVE: Find it.\nCURRENT URL: {CURRENT_URL}\nCURRENT ACCESSIBILITY TREE:\n")
    assert text.endswith("PREVIOUS ACTION: click [3]\nCURRENT ACTION: scroll [down]")
    assert "more lines cut)" in text and len(text) < 900
    first = build_world_model_messages("g", CURRENT_URL, CURRENT_TREE, "click [13]")[1]["content"]
    assert "PREVIOUS ACTION: None" in first


# --- output format ---------------------------------------------------------------------------


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("next_url", ["", "file:///miniwob/done.html"])
def test_target_format_round_trips_through_the_parser(terminal, next_url):
    changes = "The ONE button gets focus.\nNothing else changes."
    text = format_world_model_target(changes, next_url, NEXT_TREE, terminal)
    prediction = parse_world_model_output(text, CURRENT_URL, CURRENT_TREE)
    assert prediction.error is None and not prediction.fallback
    assert prediction.changes == changes
    assert prediction.axtree == NEXT_TREE
    assert prediction.url == (next_url or CURRENT_URL)
    assert prediction.terminal is terminal


GOOD = f"[Web state changes]\nButton ONE is focused.\n[Next page accessibility tree]\n{NEXT_TREE}"

# (name, text, finish_reason, expected tree ("next"/"current"), error fragment or None, expected changes)
MALFORMED = [
    ("well formed", GOOD, "stop", "next", None, "Button ONE is focused."),
    ("markdown fences", f"```\n{GOOD}\n```", "stop", "next", "fences", "Button ONE is focused."),
    ("fenced tree only", GOOD.replace(NEXT_TREE, f"```text\n{NEXT_TREE}\n```"), "stop", "next", "fences", None),
    ("text before headers", f"Sure! Here is my prediction.\n{GOOD}", "stop", "next", "before the first", None),
    (
        "bold headers with colons",
        f"**Web state changes:**\nButton ONE is focused.\n## Next page accessibility tree:\n{NEXT_TREE}",
        "stop",
        "next",
        None,
        "Button ONE is focused.",
    ),
    ("no headers at all", "The button is clicked and the page changes.", "stop", "current", "missing sections", None),
    ("empty string", "", "stop", "current", "missing sections", ""),
    ("missing tree section", "[Web state changes]\nNothing.", "stop", "current", "missing section [Next", "Nothing."),
    ("missing changes section", f"[Next page accessibility tree]\n{NEXT_TREE}", "stop", "next", "missing section", ""),
    (
        "empty tree",
        "[Web state changes]\nIt closes.\n[Next page accessibility tree]\n\n",
        "stop",
        "current",
        "empty",
        None,
    ),
    (
        "summary instead of a tree",
        "[Web state changes]\nx\n[Next page accessibility tree]\nThe tree is the same as before but focused.",
        "stop",
        "current",
        "no accessibility-tree nodes",
        None,
    ),
    ("truncated generation", GOOD + "\n\t[15] butt", "length", "next", "token limit", None),
    ("truncated in changes", "[Web state changes]\nThe button", "length", "current", "token limit", None),
    (
        "repeated sections",
        GOOD + "\n[Web state changes]\nagain\n[Next page accessibility tree]\nx",
        "stop",
        "next",
        "repeated",
        None,
    ),  # fmt: skip
]


@pytest.mark.parametrize(("text", "finish", "tree", "error", "changes"), [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])  # fmt: skip
def test_malformed_outputs_are_reported_never_raised(text, finish, tree, error, changes):
    prediction = parse_world_model_output(text, CURRENT_URL, CURRENT_TREE, finish_reason=finish)
    assert prediction.axtree == (NEXT_TREE if tree == "next" else CURRENT_TREE)
    assert prediction.fallback is (tree == "current")
    assert prediction.url == CURRENT_URL
    assert not prediction.terminal
    if error is None:
        assert prediction.error is None
    else:
        assert error in prediction.error
    if changes is not None:
        assert prediction.changes == changes


def test_terminal_marker_and_url_line_are_read_leniently():
    tree = f"[Next page accessibility tree]\nurl: http://x/done\n{NEXT_TREE}"
    text = f"[Web state changes]\nDone.\n{tree}\n**Episode ended**"
    prediction = parse_world_model_output(text, CURRENT_URL, CURRENT_TREE)
    assert prediction.terminal and prediction.url == "http://x/done" and prediction.axtree == NEXT_TREE


def test_non_text_output_is_an_error_not_an_exception():
    prediction = parse_world_model_output(None, CURRENT_URL, CURRENT_TREE)  # type: ignore[arg-type]
    assert prediction.fallback and "not text" in prediction.error


# --- WebWorldModel ---------------------------------------------------------------------------


def _requests(count: int) -> list[WorldModelRequest]:
    return [WorldModelRequest("Click ONE.", CURRENT_URL, CURRENT_TREE, f"click [{13 + i % 2}]") for i in range(count)]


def test_predict_makes_one_backend_call_for_the_whole_batch():
    backend = ScriptedBackend(
        lambda conv: format_world_model_target("ok", "", NEXT_TREE, "ACTION: click [14]" in conv[1]["content"])
    )
    world_model = WebWorldModel(backend, max_axtree_chars=1000)
    predictions = world_model.predict(_requests(5), seed=7)
    assert len(backend.calls) == 1
    conversations, params = backend.calls[0]
    assert len(conversations) == 5 and params.seed == 7
    assert (params.temperature, params.top_p) == (0.7, 0.9)
    assert [p.terminal for p in predictions] == [False, True, False, True, False]
    assert all(p.axtree == NEXT_TREE for p in predictions)
    assert world_model.predict([], seed=1) == [] and len(backend.calls) == 1


def test_predict_reports_truncation_from_the_backend():
    backend = ScriptedBackend(lambda conv: GOOD + "\n\t[99] li", finish_reason="length")
    (prediction,) = WebWorldModel(backend).predict(_requests(1))
    assert "token limit" in prediction.error and prediction.axtree == NEXT_TREE


@pytest.mark.parametrize(
    "kwargs",
    [{"backend": object()}, {"max_axtree_chars": -1}, {"output_mode": "xml"}],
    ids=["backend", "chars", "mode"],
)
def test_world_model_rejects_bad_arguments(kwargs):
    arguments = {"backend": ScriptedBackend(lambda conv: ""), **kwargs}
    with pytest.raises(ValueError):
        WebWorldModel(**arguments)


# --- judge -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reward", "has_error"),
    [
        ("REASONING: The page shows it.\nVERDICT: SUCCESS", 1.0, False),
        ("REASONING: Not done.\nVERDICT: FAILURE", 0.0, False),
        ("**REASONING:** fine\n**VERDICT:** `SUCCESS`.", 1.0, False),
        ("Verdict: success", 1.0, False),
        ("VERDICT: SUCCESS\n...on second thought\nVERDICT: FAILURE", 0.0, False),
        ("REASONING: echoing the format\nVERDICT: SUCCESS or FAILURE", 0.0, True),
        ("I think the agent succeeded.", 0.0, True),
        ("", 0.0, True),
    ],
)
def test_judge_output_table(text, reward, has_error):
    verdict = parse_judge_output(text)
    assert verdict.reward == reward
    assert (verdict.error is not None) is has_error


def test_judge_batches_and_shows_the_whole_trajectory():
    backend = ScriptedBackend(
        lambda conv: "REASONING: yes\nVERDICT: " + ("SUCCESS" if "[42]" in conv[1]["content"] else "FAILURE")
    )
    judge = TrajectoryJudge(backend)
    requests = [
        JudgeRequest(
            "Answer 42.", (JudgeStep("click [3]", "open it"), JudgeStep("stop [42]")), CURRENT_URL, CURRENT_TREE, "42"
        ),
        JudgeRequest("Answer 42.", (JudgeStep("click [3]"),), CURRENT_URL, CURRENT_TREE, None),
    ]
    verdicts = judge.judge(requests, seed=3)
    assert [v.reward for v in verdicts] == [1.0, 0.0] and verdicts[0].reasoning == "yes"
    assert len(backend.calls) == 1 and backend.calls[0][1].greedy and backend.calls[0][1].seed == 3
    user = backend.calls[0][0][0][1]["content"]
    assert "1. click [3]\n   REASON: open it\n2. stop [42]" in user and "AGENT ANSWER: 42" in user
    assert "AGENT ANSWER: None" in backend.calls[0][0][1][1]["content"]
    assert judge.judge([]) == [] and len(backend.calls) == 1


def test_a_trained_judge_does_not_read_the_agents_reasoning():
    # The policy writes its reasoning, so a trained (compact) judge that read it could be won over by wording.
    request = JudgeRequest(
        "Submit.", (JudgeStep("click [3]", "Every field holds its text; I submit.", "[3] button 'Submit'"),), "u", "t"
    )
    compact = build_judge_messages(request, prompt_style="compact")[1]["content"]
    paper = build_judge_messages(request, prompt_style="paper")[1]["content"]
    assert "1. click [3]\n   ELEMENT: [3] button 'Submit'\nFINAL URL: u" in compact and "Every field" not in compact
    assert "   REASON: Every field holds its text; I submit." in paper
    silent = JudgeRequest("Submit.", (JudgeStep("click [3]", "", "[3] button 'Submit'"),), "u", "t")
    assert compact == build_judge_messages(silent, prompt_style="compact")[1]["content"]


# --- real models -----------------------------------------------------------------------------


def test_world_model_and_judge_on_tiny_random_model():
    from dynaweb_env.llm import make_backend

    backend = make_backend("tiny-random")
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=8)
    predictions = WebWorldModel(backend, sampling=sampling).predict(_requests(2), seed=0)
    assert len(predictions) == 2
    for prediction in predictions:
        # A random model cannot follow the format: the parser must say so and keep the page.
        assert prediction.error and prediction.fallback and prediction.axtree == CURRENT_TREE
        assert prediction.raw
    again = WebWorldModel(backend, sampling=sampling).predict(_requests(2), seed=0)
    assert [p.raw for p in again] == [p.raw for p in predictions]
    judge = TrajectoryJudge(backend, sampling=SamplingParams(temperature=0.0, max_new_tokens=8))
    verdicts = judge.judge([JudgeRequest("Click ONE.", (JudgeStep("click [13]"),), CURRENT_URL, CURRENT_TREE, None)])
    assert verdicts[0].reward == 0.0 and verdicts[0].error and verdicts[0].raw


def test_world_model_and_judge_on_smollm2_with_short_generation():
    """The embedded model end to end, kept to one short request each (a world-model prompt is ~860 tokens).

    Batching is proven on tiny-random above and in the vector-env tests; this checks that the real
    default model loads, follows the chat template and that its (cut) outputs are read safely.
    """
    from dynaweb_env.llm import make_backend

    backend = make_backend("smollm2-135m")
    world_model = WebWorldModel(backend, sampling=SamplingParams(temperature=0.0, max_new_tokens=16))
    start = time.perf_counter()
    predictions = world_model.predict(_requests(1), seed=0)
    elapsed = time.perf_counter() - start
    assert len(predictions) == 1 and all(p.raw.strip() for p in predictions)
    for prediction in predictions:
        # 16 tokens cannot hold a full answer: the cut is reported and a usable page remains.
        assert prediction.axtree.strip() and prediction.error
    judge = TrajectoryJudge(backend, sampling=SamplingParams(temperature=0.0, max_new_tokens=8))
    (verdict,) = judge.judge([JudgeRequest("Click ONE.", (JudgeStep("click [13]"),), CURRENT_URL, NEXT_TREE, None)])
    assert verdict.reward in (0.0, 1.0) and verdict.raw.strip()
    print(f"smollm2: one world-model request x 16 tokens in {elapsed:.1f}s; output: {predictions[0].raw!r}")


@pytest.mark.parametrize("judge_name", ["smollm2-135m-judge", "smollm2-135m-judge-dagger", "smollm2-135m-judge-all"])
def test_shipped_judge_tells_held_out_successes_from_their_cuts(judge_name):
    """Each shipped trained judge on real held-out MiniWoB++ trajectories it never saw.

    The first test-split trajectory of every task of the small shipped data, each as recorded (a real success) and
    cut before its last action (the task left unfinished). The prompted base model says FAILURE to every case
    (``benchmarks/results/judge/judge_accuracy.json``), which scores 0.5 here. The judges read no agent reasoning. On
    held-out seeds of the large data ``smollm2-135m-judge`` scores 0.89, weakest on one-click tasks
    (``judge/heldout_validation.json``), and ``smollm2-135m-judge-dagger`` 0.95 (``judge_dagger2/``).
    """
    from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES as BUILTIN_TRAJECTORIES
    from dynaweb_env.llm import make_backend
    from dynaweb_env.models import model_prompt_style
    from dynaweb_env.world_model.judge_cases import judge_cases
    from dynaweb_trainer.world_model_sft import load_trajectories

    first_of_task = {}
    for trajectory in load_trajectories([BUILTIN_TRAJECTORIES], "test"):
        if trajectory.success:
            first_of_task.setdefault(trajectory.task_id, trajectory)
    cases = judge_cases(list(first_of_task.values()))
    # The judges were trained on compact or grounded prompts; the paper prompt puts them off their training
    # distribution (a bare 'VERDICT' on about half the cases), so the test reads the style recorded beside the weights.
    judge = TrajectoryJudge(
        make_backend(judge_name),
        SamplingParams(temperature=0.0, max_new_tokens=48),
        prompt_style=model_prompt_style(judge_name),
    )
    verdicts = judge.judge([request for request, _, _ in cases])
    assert all(verdict.error is None for verdict in verdicts)
    truth = [reward for _, reward, _ in cases]
    assert len(first_of_task) >= 5 and truth.count(1.0) == truth.count(0.0) == len(first_of_task)
    correct = [verdict.reward == reward for verdict, reward in zip(verdicts, truth, strict=True)]
    successes = [c for c, reward in zip(correct, truth, strict=True) if reward == 1.0]
    failures = [c for c, reward in zip(correct, truth, strict=True) if reward == 0.0]
    assert sum(correct) / len(correct) >= 0.75, (sum(correct), len(correct))
    assert sum(successes) >= len(successes) / 2 and sum(failures) >= len(failures) / 2
