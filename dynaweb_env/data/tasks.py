"""Which real tasks and seeds an evaluation or a data build runs: the task suites and the seed grammar.

* :data:`TASK_SUITES`: named sets of MiniWoB++ task ids (``small``: the tasks with scripted experts, the default
  of ``dynaweb eval``; ``multistep``: the five-task suite of 3-4 actions;
  ``long``: the tasks whose expert episodes take 5 actions or more).
* :func:`expand_tasks`: the one grammar of task lists (ids and suite names, ``--tasks long``).
* :func:`parse_seeds`: the one grammar of task-seed lists on every command line (``--seeds 0-99``).
* :func:`step_limit`: the step limit of a task, raised above the default for long tasks (:data:`TASK_STEP_LIMITS`).

Which split a task seed belongs to is :func:`dynaweb_env.data.shipped.split_of`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

#: Tasks evaluated when none are named: the MiniWoB++ tasks that have scripted experts.
DEFAULT_TASKS: tuple[str, ...] = (
    "miniwob.click-button", "miniwob.click-checkboxes", "miniwob.click-dialog", "miniwob.click-option",
    "miniwob.click-tab", "miniwob.enter-password", "miniwob.enter-text", "miniwob.focus-text",
    "miniwob.login-user",
)  # fmt: skip
#: The five-task multi-step suite of the paper-claims runs: 3 to 4 actions each (mean actions over 50 episodes in
#: ``benchmarks/results/expert_success/expert_success.json``: login-user-popup 3.96, the others 2.98-3.0).
MULTISTEP_TASKS: tuple[str, ...] = (
    "miniwob.login-user-popup", "miniwob.use-autocomplete", "miniwob.login-user", "miniwob.enter-password",
    "miniwob.click-checkboxes",
)  # fmt: skip
#: The long tasks: every MiniWoB++ task whose scripted expert's median episode is 5 actions or more over seeds
#: 0-49 (``benchmarks/results/expert_success/expert_success.json``; 100% success each). Their step limits are in
#: :data:`TASK_STEP_LIMITS`. The ``-nodelay`` twins are left out: the same seed gives them the same goal and page.
LONG_TASKS: tuple[str, ...] = (
    "miniwob.book-flight", "miniwob.choose-date", "miniwob.click-checkboxes-large", "miniwob.daily-calendar",
    "miniwob.form-sequence", "miniwob.number-checkboxes", "miniwob.social-media-all", "miniwob.text-editor",
    "miniwob.use-slider-2",
)  # fmt: skip
#: Named task suites (``benchmarks/paper_claims.py --suite``).
TASK_SUITES: dict[str, tuple[str, ...]] = {"small": DEFAULT_TASKS, "multistep": MULTISTEP_TASKS, "long": LONG_TASKS}

#: The step limits of tasks whose expert episodes need more actions than the paper's 10 (the longest expert
#: episode over seeds 0-49 in ``benchmarks/results/expert_success/expert_success.json``, plus room for a
#: policy's mistakes). Every other task keeps the limit it is given. Applied by :func:`step_limit`.
TASK_STEP_LIMITS: dict[str, int] = {
    "miniwob.book-flight": 15,
    "miniwob.book-flight-nodelay": 15,
    "miniwob.choose-date": 20,
    "miniwob.choose-date-nodelay": 20,
    "miniwob.click-checkboxes-large": 20,
    "miniwob.daily-calendar": 15,
    "miniwob.number-checkboxes": 20,
    "miniwob.social-media-all": 15,
    "miniwob.social-media-some": 15,
    # Longest over seeds 0-49: 7; a plan may take up to 8 keys (dynaweb_env.experts.miniwob_editor): 12 actions.
    "miniwob.text-editor": 15,
    "miniwob.use-slider-2": 20,
}


def step_limit(task_id: str | None, default: int) -> int:
    """The most policy turns an episode of ``task_id`` gets: ``default``, raised to the task's own limit.

    ``RealWeb-v0``, :func:`~dynaweb_trainer.rollout.run_episodes` (so ``dynaweb eval``, training rollouts and
    data collection) and the expert pool all apply this one rule, so a long task is never cut short by the
    10-step default and every other task keeps ``default``.

    Args:
        task_id: A task id such as ``"miniwob.click-checkboxes-large"`` (``None`` or unknown: ``default``).
        default: The limit asked for (an env's ``max_steps``, ``--max-steps``, ``agent_max_steps``).

    Returns:
        ``max(default, TASK_STEP_LIMITS[task_id])`` for a task listed in :data:`TASK_STEP_LIMITS`, else ``default``.

    Example:
        >>> step_limit("miniwob.click-button", 10), step_limit("miniwob.click-checkboxes-large", 10)
        (10, 20)
    """
    return max(default, TASK_STEP_LIMITS.get(task_id or "", default))


def expand_tasks(items: str | Sequence[str]) -> list[str]:
    """Task ids from a command line's task list, where a suite's name stands for its tasks.

    Args:
        items: Task ids and names of :data:`TASK_SUITES`, separated by commas or spaces, or a list of such strings.

    Returns:
        The task ids in the order given, each once.

    Raises:
        ValueError: When the list names no task.

    Example:
        >>> expand_tasks("miniwob.click-button,multistep")[:3]
        ['miniwob.click-button', 'miniwob.login-user-popup', 'miniwob.use-autocomplete']
    """
    parts = [items] if isinstance(items, str) else list(items)
    tasks: list[str] = []
    for item in (word for part in parts for word in str(part).replace(",", " ").split()):
        tasks += [task for task in TASK_SUITES.get(item, (item,)) if task not in tasks]
    if not tasks:
        raise ValueError(f"no task in {items!r}: name task ids or a suite ({', '.join(TASK_SUITES)})")
    return tasks


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_seeds(text: str | int | Sequence[str | int]) -> list[int]:
    """Expand a seed specification into a list of task seeds.

    Args:
        text: Items separated by commas or spaces, each a seed (``"7"``) or an inclusive range (``"100-149"``):
            ``"0-4,10"``, ``"1 5 9"``; or a list of such strings (a YAML list) or integers.

    Returns:
        The seeds in the order given.

    Raises:
        ValueError: On anything else (negative seeds, reversed ranges, non-numbers), no seed at all, or a seed
            given twice.

    Example:
        >>> parse_seeds("100-102,7")
        [100, 101, 102, 7]
    """
    parts = [text] if isinstance(text, (str, int)) else list(text)
    seeds: list[int] = []
    for part in parts:
        for item in str(part).replace(" ", ",").split(","):
            if not item:
                continue
            low, dash, high = item.partition("-")
            if not _is_number(low) or (dash and not _is_number(high)):
                raise ValueError(f"bad seed {item!r} in {text!r}: use integers and inclusive ranges, e.g. 100-149,200")
            if dash and int(high) < int(low):
                raise ValueError(f"bad seed range {item!r}: the end is before the start")
            seeds.extend(range(int(low), int(high or low) + 1))
    if not seeds:
        raise ValueError(f"no seeds in {text!r}: use e.g. 0-99 or 1,5,9")
    if len(set(seeds)) != len(seeds):
        repeated = sorted(seed for seed, count in Counter(seeds).items() if count > 1)
        raise ValueError(f"seeds repeat in {text!r}: {repeated[:10]}")
    return seeds


__all__ = [
    "DEFAULT_TASKS", "LONG_TASKS", "MULTISTEP_TASKS", "TASK_STEP_LIMITS", "TASK_SUITES", "expand_tasks", "parse_seeds",
    "step_limit",
]  # fmt: skip
