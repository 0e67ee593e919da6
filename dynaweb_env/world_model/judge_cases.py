"""Judge cases: real trajectories as judge requests with their true reward, to train and measure a judge.

:func:`judge_cases` is what ``dynaweb-train-wm --examples judge`` learns from and ``dynaweb-eval-wm`` scores a
judge on: each trajectory as recorded, and a success cut short (or its final action taken too early) as a failure.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..actions import parse_action
from ..data.schema import Step, Trajectory
from ..observation import action_target
from .judge import JudgeRequest, judge_step
from .requirements import acts_on_page

#: What :func:`judge_cases` appends to a success's id for its cut before the last action, and for its final action
#: taken after its first ``k`` actions (then ``k``).
CUT_CASE, EARLY_FINAL_CASE = "/cut", "/early"


def judge_cases(
    trajectories: Sequence[Trajectory], every_prefix: bool = False, early_final: bool = False
) -> list[tuple[JudgeRequest, float, str]]:
    """Real trajectories as judge requests with their true reward, for training and measuring a judge.

    Each trajectory is judged as recorded (its real reward). A success cut before its last action is a
    failure (the task's final action was never taken), named ``<id>/cut``; with ``every_prefix`` every shorter
    cut is one too (``<id>/first<k>``: the first ``k`` actions, ending on the page where action ``k + 1`` was
    taken), as a dream that starts mid-way or stops early is. A real failure is judged only as recorded: its
    prefixes fail as well (a MiniWoB++ episode ends at its success), but they would only tilt the cases further
    toward failure.

    With ``early_final``, a success's final action taken too early is a failure as well, named ``<id>/early<k>``:
    the first ``k`` actions, then the final one on the page where action ``k + 1`` was taken, which is also the
    final page (a form's submit changes none of its fields). These are the near misses that a judge learned from
    successes and their cuts alone pays for: it has seen the final click end every success and no failure, so a
    Submit on an empty form reads as done (issue 19: the demonstrations judge's seed 2). A case is kept only where
    the final action's element is on that page. Expert demonstrations take no needless action, so skipping any of
    them fails the task.

    Returns:
        ``(request, reward, name)`` triples, each trajectory's cases in order (as recorded first).
    """
    cases = []
    for trajectory in trajectories:
        acted = [step for step in trajectory.steps if step.action.strip()]
        kept = [len(acted)]
        if trajectory.success and acted:
            kept += list(range(len(acted) - 1, -1, -1)) if every_prefix else [len(acted) - 1]
        for count in kept:
            cut = count < len(acted)
            steps = acted[:count]
            final = trajectory.steps[trajectory.steps.index(acted[count])] if cut else trajectory.steps[-1]
            answer = None
            if steps:
                try:
                    parsed = parse_action(steps[-1].action)
                except ValueError:  # a malformed recorded action is judged as an action, not an answer
                    parsed = None
                if parsed is not None and parsed.name == "stop":
                    answer = parsed.args[0] if parsed.args else ""
            request = JudgeRequest(
                trajectory.goal,
                tuple(judge_step(s.action, s.reasoning, s.axtree) for s in steps),
                final.url,
                final.axtree,
                answer,
                last_action_axtree=last_acted_page(steps),
            )
            if not cut:
                name = trajectory.id
            else:
                name = f"{trajectory.id}{CUT_CASE}" if count == len(acted) - 1 else f"{trajectory.id}/first{count}"
            cases.append((request, 0.0 if cut else float(trajectory.reward), name))
        if early_final and trajectory.success:
            cases += _early_final_cases(trajectory, acted)
    return cases


def last_acted_page(steps: Sequence[Step]) -> str:
    """The page the last action other than ``stop`` was taken on, ``""`` if none
    (:attr:`~dynaweb_env.world_model.judge.JudgeRequest.last_action_axtree`)."""
    return next((step.axtree for step in reversed(steps) if acts_on_page(step.action)), "")


def _early_final_cases(trajectory: Trajectory, acted: Sequence[Step]) -> list[tuple[JudgeRequest, float, str]]:
    """A success's final action after each shorter prefix of its other actions, as failures (see
    :func:`judge_cases`)."""
    cases = []
    final_action = acted[-1].action if acted else ""  # no action: no shorter prefix either, so no case
    for count in range(len(acted) - 1):
        page = acted[count]  # the page where the next action was taken: the final one is taken there instead
        target = action_target(final_action, page.axtree)
        if not target:  # not on that page (a later page's element), or an action without one
            continue
        steps = [judge_step(s.action, s.reasoning, s.axtree) for s in acted[:count]]
        steps.append(judge_step(final_action, acted[-1].reasoning, page.axtree))
        request = JudgeRequest(trajectory.goal, tuple(steps), page.url, page.axtree, None, page.axtree)
        cases.append((request, 0.0, f"{trajectory.id}{EARLY_FINAL_CASE}{count}"))
    return cases


__all__ = ["CUT_CASE", "EARLY_FINAL_CASE", "judge_cases", "last_acted_page"]
