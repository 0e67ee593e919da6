"""The web world model's prompt and output format: the one place that defines both.

The prompt styles (:data:`PROMPT_STYLES`) share the user message and the output format:

- ``"paper"``: the paper's long system prompt (below). For prompted models, e.g. a large model behind
  ``openai:``, which learn the task from the prompt alone; the shipped tree world model was trained on it.
- ``"compact"``: :data:`COMPACT_WORLD_MODEL_SYSTEM_PROMPT`, a few lines naming the output format. For
  models *trained* on the format (``dynaweb-train-wm --prompt_style compact``): the paper's ~850
  prompt tokens teach a fine-tuned model nothing and dominate its training and inference cost.
- ``"grounded"``: compact for the world model; for the judge, compact plus the objective-grounding notes of
  :mod:`~dynaweb_env.world_model.grounding`.
- ``"grounded-text"``: grounded, and the judge also reads an unnamed element it acted on by the text it shows.

A trained model records the style it was trained with
(:func:`~dynaweb_env.models.model_prompt_style`), so it is always prompted the way it learned.

The paper-style system prompt is the paper's (DynaWeb, appendix A.2, Figure 6), verbatim, followed by a short
addendum, :data:`WORLD_MODEL_FORMAT_NOTES`, that states two conventions the paper leaves implicit:

- **Next URL.** The tree section may open with a line ``URL: <next url>``. Without it the page keeps
  its current URL.
- **Terminal pages.** A line ``[Episode ended]`` after the tree says that the action ended the
  episode (the task was submitted or the session closed); the dream then stops early, as in the
  paper ("early termination if the world model generates a terminal state").

A complete output therefore reads::

    [Web state changes]
    The "Submit" button was clicked; the form disappears and a confirmation message is shown.
    [Next page accessibility tree]
    URL: http://example.com/done
    RootWebArea 'Done', focused
    \t[5] StaticText 'Thank you!'
    [Episode ended]

:func:`format_world_model_target` writes exactly this layout (it is what supervised fine-tuning
of the world model on real transitions trains on, terminal transitions included), and
:func:`~dynaweb_env.world_model.parsing.parse_world_model_output` reads it back.
"""

from __future__ import annotations

from ..action_spec import ACTION_SPECS, PAPER_ACTIONS
from ..axtree import truncate_axtree
from ..llm.base import Conversation
from .output_format import CHANGES_HEADER, TERMINAL_MARKER, TREE_HEADER, URL_PREFIX

#: The actions the paper-style prompt describes: the paper's twelve, on which the shipped tree world model was
#: trained (``select`` and the others are read as action strings; their wording is in their specs).
WORLD_MODEL_PROMPT_ACTIONS: tuple[str, ...] = PAPER_ACTIONS


def world_model_action_groups(
    names: tuple[str, ...] = WORLD_MODEL_PROMPT_ACTIONS,
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """``((group title, ((action, wording), ...)), ...)`` for ``names``, in the order of the action table."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for name, spec in ACTION_SPECS.items():
        if name in names:
            groups.setdefault(spec.world_model_group, []).append((name, spec.world_model_wording))
    return tuple((title, tuple(actions)) for title, actions in groups.items())


#: The paper's description of each action, verbatim, grouped as in its prompt (from the action table).
WORLD_MODEL_ACTION_GROUPS = world_model_action_groups()


def _action_block(names: tuple[str, ...] = WORLD_MODEL_PROMPT_ACTIONS) -> str:
    paragraphs = []
    for title, actions in world_model_action_groups(names):
        paragraphs.append(title)
        paragraphs.extend(description for _, description in actions)
    return "\n\n".join(paragraphs)


#: The paper's world-model system prompt (appendix A.2), verbatim.
WORLD_MODEL_SYSTEM_PROMPT = f"""\
You are an intelligent agent that predicts next state from given current action in a web environment, \
with your own logical reasoning.

Here's the information you'll have:

The user's objective: This is the task you're trying to complete.

The current web page's accessibility tree: This is a simplified representation of the webpage, providing key \
information.

The current web page's URL: This is the page you're currently navigating.

The previous action: This is the action you just performed in the previous step. It may be helpful to track your \
progress.

The current action: This is the current action that you performed to achieve the user's objective in the current \
web page's accessibility tree.

The format of previous actions can fall into several categories:

{_action_block()}

Given the information above, you should first perform reasoning to predict expected changes on the current web \
page's accessibility tree, and then generate the resulting next web page's accessibility tree based on your \
predicted web page changes.

Generate your answer in the following format:

{CHANGES_HEADER}

changes

{TREE_HEADER}

next_acc_tree

where `changes` are the predicted web page changes, and `next_acc_tree` is your predicted next page \
accessibility tree.

For `next_acc_tree`, you MUST generate a valid accessibility tree based on your predicted changes, do NOT output \
summary descriptions of how the `next_acc_tree` will change.

If the full predicted `next_acc_tree` is too long, you should output a pruned tree by removing unimportant \
elements that the web agent will unlikely use in subsequent action steps.

Meanwhile, you should NOT omit key unchanged elements that the web agent might interact with in future time \
steps.

Note: Even if the web page does not change, you must still output the complete `next_acc_tree` !"""

#: DynaWeb's addendum to the paper's prompt: how the next URL and a terminal page are written.
WORLD_MODEL_FORMAT_NOTES = f"""\
If the action leads to a different URL, write `{URL_PREFIX} <new url>` as the first line of `next_acc_tree`; \
otherwise the URL stays the same.

If the action ends the episode (for example, the task's answer was submitted), write `{TERMINAL_MARKER}` on its \
own line after `next_acc_tree`."""

#: Placeholder shown for "no previous action" (the first step of an episode).
NO_PREVIOUS_ACTION = "None"


#: The prompt styles: ``"paper"`` (the paper's system prompt), ``"compact"`` (for trained models) and
#: ``"grounded"``: compact, and the judge's prompt also states which of the objective's names the trajectory acted on
#: and the final page shows (:mod:`~dynaweb_env.world_model.grounding`); ``"grounded-text"``: grounded, and an
#: unnamed element acted on is also shown, and grounded, by the text it shows (``[17] listitem ''`` over
#: ``StaticText 'Marcella'``). World-model prompts read both as compact.
PROMPT_STYLES = ("paper", "compact", "grounded", "grounded-text")
#: The styles whose judge prompts carry the objective-grounding notes.
GROUNDED_STYLES = frozenset({"grounded", "grounded-text"})
#: Each style a model trained in the key style may train on in: it only adds lines or fields to the judge prompt.
CONTINUED_STYLES = {"compact": ("grounded", "grounded-text"), "grounded": ("grounded-text",)}

#: The compact style's opening, shared by the tree and patch modes' compact prompts.
COMPACT_WORLD_MODEL_INTRO = (
    "Predict the web page that results from the current action, given the objective, the current URL and "
    "accessibility tree, and the previous action."
)

#: The compact style's world-model system prompt (tree mode): the output format and nothing else.
COMPACT_WORLD_MODEL_SYSTEM_PROMPT = f"""\
{COMPACT_WORLD_MODEL_INTRO} Answer:
{CHANGES_HEADER}
<the changes>
{TREE_HEADER}
{URL_PREFIX} <new url, only if it changed>
<the full next accessibility tree>
{TERMINAL_MARKER} <only if the action ended the episode>"""


def check_prompt_style(prompt_style: str) -> str:
    """``prompt_style`` if it is one of :data:`PROMPT_STYLES`; ``ValueError`` otherwise."""
    if prompt_style not in PROMPT_STYLES:
        raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {prompt_style!r}")
    return prompt_style


def is_compact_style(prompt_style: str) -> bool:
    """Whether a style prompts with the compact system prompts (every style but ``"paper"``)."""
    return check_prompt_style(prompt_style) != "paper"


def continues_prompt_style(recorded: str, prompt_style: str) -> bool:
    """Whether a model trained on ``recorded`` prompts may train on in ``prompt_style``: the same style, or one of
    :data:`CONTINUED_STYLES` (``"compact"`` on to ``"grounded"``, ``"grounded"`` on to ``"grounded-text"``), which
    add lines or fields to the compact judge prompt and change nothing else."""
    return recorded == prompt_style or prompt_style in CONTINUED_STYLES.get(recorded, ())


def world_model_system_prompt(prompt_style: str = "paper") -> str:
    """The full system message of tree mode.

    ``"paper"``: the paper's prompt followed by :data:`WORLD_MODEL_FORMAT_NOTES`; ``"compact"``:
    :data:`COMPACT_WORLD_MODEL_SYSTEM_PROMPT`.
    """
    if is_compact_style(prompt_style):
        return COMPACT_WORLD_MODEL_SYSTEM_PROMPT
    return f"{WORLD_MODEL_SYSTEM_PROMPT}\n\n{WORLD_MODEL_FORMAT_NOTES}"


def format_world_model_input(
    goal: str,
    url: str,
    axtree: str,
    action: str,
    previous_action: str = "",
    max_axtree_chars: int = 0,
) -> str:
    """The user message: objective, current URL, current tree, previous action, current action.

    Args:
        goal: The task query.
        url: The current page's URL.
        axtree: The current accessibility tree (flattened text form).
        action: The action whose effect is to be predicted.
        previous_action: The action taken before it (``""`` at the first step).
        max_axtree_chars: Cut the tree to this many characters with
            :func:`~dynaweb_env.observation.truncate_axtree` (``0``: no limit).
    """
    return (
        f"OBJECTIVE: {goal}\n"
        f"CURRENT URL: {url}\n"
        f"CURRENT ACCESSIBILITY TREE:\n{truncate_axtree(axtree, max_axtree_chars)}\n"
        f"PREVIOUS ACTION: {previous_action or NO_PREVIOUS_ACTION}\n"
        f"CURRENT ACTION: {action}"
    )


def build_world_model_messages(
    goal: str,
    url: str,
    axtree: str,
    action: str,
    previous_action: str = "",
    max_axtree_chars: int = 0,
    system_prompt: str | None = None,
) -> Conversation:
    """The chat conversation asking the world model for the next state (system + user message).

    Arguments are those of :func:`format_world_model_input`; ``system_prompt`` replaces
    :func:`world_model_system_prompt` (an output-mode variant, e.g. patch mode's).
    """
    return [
        {"role": "system", "content": world_model_system_prompt() if system_prompt is None else system_prompt},
        {
            "role": "user",
            "content": format_world_model_input(goal, url, axtree, action, previous_action, max_axtree_chars),
        },
    ]


def format_world_model_target(changes: str, next_url: str, next_axtree: str, terminal: bool = False) -> str:
    """The world model's output for one transition, in the exact layout the parser reads.

    This is the supervised target for training the world model on real transitions (including the
    last transition of an episode, with ``terminal=True``).

    Args:
        changes: The description Δ of the state changes (with any reasoning before it).
        next_url: The next page's URL; written as a ``URL:`` line unless empty.
        next_axtree: The next page's accessibility tree.
        terminal: Whether the transition ended the episode (appends :data:`TERMINAL_MARKER`).
    """
    parts = [CHANGES_HEADER, changes.strip(), TREE_HEADER]
    if next_url.strip():
        parts.append(f"{URL_PREFIX} {next_url.strip()}")
    parts.append(next_axtree.strip("\n"))
    if terminal:
        parts.append(TERMINAL_MARKER)
    return "\n".join(parts)


__all__ = [
    "CHANGES_HEADER",
    "TREE_HEADER",
    "TERMINAL_MARKER",
    "URL_PREFIX",
    "NO_PREVIOUS_ACTION",
    "WORLD_MODEL_ACTION_GROUPS",
    "WORLD_MODEL_PROMPT_ACTIONS",
    "world_model_action_groups",
    "WORLD_MODEL_SYSTEM_PROMPT",
    "WORLD_MODEL_FORMAT_NOTES",
    "CONTINUED_STYLES",
    "GROUNDED_STYLES",
    "PROMPT_STYLES",
    "continues_prompt_style",
    "is_compact_style",
    "COMPACT_WORLD_MODEL_SYSTEM_PROMPT",
    "check_prompt_style",
    "world_model_system_prompt",
    "format_world_model_input",
    "build_world_model_messages",
    "format_world_model_target",
]
