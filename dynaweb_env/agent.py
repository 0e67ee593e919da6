"""The web agent's prompt and response format: what a policy sees and must write at each step.

One definition serves every place a policy meets an environment: LLM rollouts in the trainer,
expert demonstrations encoded for SFT and expert interleaving, evaluation, and the demo. A policy
turn is a chat exchange::

    system     POLICY_SYSTEM_PROMPT (the paper's appendix A.1 prompt, for our action grammar)
    user       observation_message(observation)          # objective, URL, tree, last action/error
    assistant  "REASON: ...\\nACTION: click [13]"          # format_policy_response(reasoning, action)
    user       observation_message(next observation)
    assistant  ...

By default the whole episode is one growing conversation (multi-turn), so the tokens a trainer optimises are
exactly the tokens the policy saw and sampled. With ``page_history="actions"`` each turn is its own two-message
prompt instead (:func:`observation_actions_message`: the latest page whole, the actions taken so far as a list),
which stays bounded however long the task. Two response styles exist: ``"compact"`` (``REASON``
and ``ACTION`` only; the default, suited to small models) and ``"paper"`` (the paper's five
sections). :func:`format_policy_response` is the one writer of the format;
:func:`dynaweb_env.actions.read_action` (what both envs use) and
:func:`dynaweb_env.actions.extract_action` read the action from either style.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from .action_spec import OFFERED_ACTIONS
from .actions import describe_actions
from .observation import render_observation

ResponseStyle = Literal["compact", "paper"]
#: How the pages after the first appear: in one growing conversation, ``"full"`` (every page whole, the default) or
#: ``"edits"`` (:func:`observation_edits_message`, where that is shorter); or ``"actions"``: a prompt of its own each
#: turn, the latest page whole and the earlier turns as the list of their actions (:func:`observation_actions_message`).
PageHistory = Literal["full", "edits", "actions"]
PAGE_HISTORIES: tuple[str, ...] = get_args(PageHistory)
#: The command-line help of every tool's ``page_history`` option.
PAGE_HISTORY_HELP = (
    "Pages after the first: whole (full) or as edits of the page before (edits) in one growing conversation, or a "
    "prompt of its own each turn with the latest page and the actions so far (actions)."
)
#: Characters of one earlier action kept in an ``"actions"`` history (a model's answer is bounded, a replayed one
#: may not be).
MAX_HISTORY_ACTION_CHARS = 200


def check_page_history(page_history: str) -> str:
    """``page_history`` if it is one of :data:`PAGE_HISTORIES` (``ValueError`` otherwise): every tool's one check."""
    if page_history not in PAGE_HISTORIES:
        raise ValueError(f"page_history must be one of {PAGE_HISTORIES}, got {page_history!r}")
    return page_history


#: The line that introduces a page written as edits of the page before.
EDITS_HEADER = "PAGE EDITS (of the page before):"

#: Actions offered to the policy: the paper's grammar, then ``select``
#: (:data:`~dynaweb_env.action_spec.OFFERED_ACTIONS`).
#: MiniWoB++ tasks need no tab or URL actions, but the grammar stays complete so the same policy runs on
#: WebArena-style sites.
DEFAULT_POLICY_ACTIONS: tuple[str, ...] = OFFERED_ACTIONS

_PAPER_SECTIONS = """Generate the response in the following format:
INTERACTION HISTORY SUMMARY:
Emphasize all important details in the INTERACTION HISTORY section.

OBSERVATION DESCRIPTION:
Describe information in the CURRENT OBSERVATION section. Emphasize elements and features that are \
relevant or potentially helpful for fulfilling the objective in detail.

REASON:
Provide your rationale for proposing the subsequent action commands here.

ACTION:
Select your action here.

OBSERVATION HIGHLIGHT:
List the numerical ids of elements on the current webpage based on which you would issue your action. \
Also include elements on the current webpage you would attend to if you fail in the future and have to \
restore to this step. Don't include elements from the previous pages. Select elements at a higher \
hierarchical level if most their children nodes are considered crucial. Sort by relevance and potential \
values from high to low, and separate the ids with commas. E.g., 1321, 52, 756, 838."""

_COMPACT_SECTIONS = """Generate the response in the following format:
REASON:
Provide your rationale for proposing the subsequent action command here, in one or two sentences.

ACTION:
Select your action here."""


def policy_system_prompt(
    style: ResponseStyle = "compact", actions: Sequence[str] = DEFAULT_POLICY_ACTIONS, action_set: str = "paper"
) -> str:
    """The agent system prompt (paper, appendix A.1), for the given response style and actions.

    Args:
        style: ``"compact"`` (``REASON`` and ``ACTION``) or ``"paper"`` (the paper's five sections).
        actions: The paper-grammar actions described (``action_set="paper"``).
        action_set: ``"paper"``, or ``"browsergym"``: the actions are BrowserGym's calls, described by
            BrowserGym's ``HighLevelActionSet.describe()``
            (:func:`~dynaweb_env.browsergym_actions.describe_browsergym_actions`).
    """
    if style not in ("compact", "paper"):
        raise ValueError(f"style must be 'compact' or 'paper', got {style!r}")
    sections = _PAPER_SECTIONS if style == "paper" else _COMPACT_SECTIONS
    if action_set != "paper":
        from .browsergym_actions import check_action_set, describe_browsergym_actions

        check_action_set(action_set)
        described = describe_browsergym_actions()
    else:
        described = describe_actions(tuple(actions))
    return (
        "You are an AI assistant performing tasks on a web browser. You will be provided with task "
        "objective, current step, web page observations, interaction history and previous taked notes. "
        "You need to issue an action for this step.\n\n"
        f"{sections}\n\n"
        "You are ONLY allowed to use the following action commands. Strictly adheres to the given format. "
        "Only issue one single action.\n"
        "Use the following actions:\n"
        f"{described}\n"
        "If clicking on a specific element doesn't trigger the transition to your desired web state, this is "
        "due to the element's lack of interactivity or GUI visibility. In such cases, move on to interact "
        "with OTHER similar or relevant elements INSTEAD."
    )


#: The default system prompt (compact style, all actions).
POLICY_SYSTEM_PROMPT = policy_system_prompt()


def observation_message(observation: dict[str, str], max_axtree_chars: int = 0) -> str:
    """The user-turn text for one observation (``max_axtree_chars`` > 0 cuts long trees)."""
    return render_observation(observation, max_axtree_chars=max_axtree_chars)


def observation_edits_message(previous_axtree: str, observation: dict[str, str], max_axtree_chars: int = 0) -> str:
    r"""The user-turn text for a page that follows one the policy has read (``previous_axtree``): the edits that turn
    that page into this one (the world model's patch format, :func:`~dynaweb_env.world_model.patch.patch_from_trees`),
    or the whole :func:`observation_message` where that is not longer.

    Both pages are cut to ``max_axtree_chars`` first, so the edits apply to the page as the policy read it. A
    conversation of edits keeps one growing sequence (so training still optimises exactly the tokens sampled),
    while a long task's episode stays short (``python -m benchmarks.observation_cut`` measures how many expert
    episodes then fit a completion budget).

    >>> page = "RootWebArea 'Form'\n\t[5] textbox 'Name'\n\t[6] button 'Submit'"
    >>> typed = {"goal": "Enter Ann", "url": "u", "axtree": page.replace("'Name'", "'Name' value='Ann'"),
    ...          "last_action": "type [5] [Ann] [0]"}
    >>> print(observation_edits_message(page, typed))
    URL: u
    PAGE EDITS (of the page before):
    CHANGE [5]: textbox 'Name' value='Ann'
    PREVIOUS ACTION: type [5] [Ann] [0]
    """
    from .axtree import truncate_axtree
    from .world_model.patch import format_patch, patch_from_trees

    before, after = (
        truncate_axtree(previous_axtree, max_axtree_chars),
        truncate_axtree(observation["axtree"], max_axtree_chars),
    )
    parts = [f"URL: {observation['url']}", EDITS_HEADER, format_patch(patch_from_trees(before, after)) or "(none)"]
    if observation.get("last_action"):
        parts.append(f"PREVIOUS ACTION: {observation['last_action']}")
    if observation.get("last_action_error"):
        parts.append(f"PREVIOUS ACTION ERROR: {observation['last_action_error']}")
    edits, whole = "\n".join(parts), observation_message(observation, max_axtree_chars)
    return edits if len(edits) < len(whole) else whole


def observation_actions_message(observation: dict[str, str], actions: Sequence[str], max_axtree_chars: int = 0) -> str:
    r"""The user-turn text of a turn that has a prompt of its own (``page_history="actions"``): the page whole, then the
    actions the episode has taken, in order (each cut to :data:`MAX_HISTORY_ACTION_CHARS`), in place of the
    observation's single ``PREVIOUS ACTION``.

    >>> page = {"goal": "Enter Ann", "url": "u", "axtree": "[5] textbox 'Name' value='Ann'",
    ...         "last_action": "type [5] [Ann] [0]"}
    >>> print(observation_actions_message(page, ["click [5]", "type [5] [Ann] [0]"]))
    OBJECTIVE: Enter Ann
    URL: u
    OBSERVATION:
    [5] textbox 'Name' value='Ann'
    PREVIOUS ACTIONS:
    1. click [5]
    2. type [5] [Ann] [0]
    """
    page = observation_message({**observation, "last_action": "", "last_action_error": ""}, max_axtree_chars)
    parts = [page]
    if actions:
        parts.append("PREVIOUS ACTIONS:")
        parts += [
            f"{index}. {' '.join(action.split())[:MAX_HISTORY_ACTION_CHARS]}" for index, action in enumerate(actions, 1)
        ]
    if observation.get("last_action_error"):
        parts.append(f"PREVIOUS ACTION ERROR: {observation['last_action_error']}")
    return "\n".join(parts)


def format_policy_response(reasoning: str, action: str) -> str:
    """A response in the compact format: how expert demonstrations are written as policy turns."""
    return f"REASON: {' '.join(reasoning.split()) or 'N/A'}\nACTION: {action}"


def initial_conversation(
    observation: dict[str, str], system_prompt: str = POLICY_SYSTEM_PROMPT, max_axtree_chars: int = 0
) -> list[dict[str, str]]:
    """The conversation at the first step of an episode: system prompt plus the first observation."""
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": observation_message(observation, max_axtree_chars)},
    ]


__all__ = [
    "ResponseStyle",
    "DEFAULT_POLICY_ACTIONS",
    "POLICY_SYSTEM_PROMPT",
    "policy_system_prompt",
    "observation_message",
    "observation_edits_message",
    "observation_actions_message",
    "MAX_HISTORY_ACTION_CHARS",
    "EDITS_HEADER",
    "PAGE_HISTORIES",
    "PAGE_HISTORY_HELP",
    "check_page_history",
    "PageHistory",
    "format_policy_response",
    "initial_conversation",
]
