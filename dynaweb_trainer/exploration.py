"""Exploring policies for ``dynaweb-collect``: the scripted expert with deliberate mistakes.

A world model and a judge learn what a page does after a mistake only from data that holds mistakes.
Two policies put them there, each reproducibly seeded by ``(seed, task, task seed, turn)``:

- :class:`ExplorationPolicy` (``--policy explore``): at each step, with probability ``epsilon``, a
  random valid action anywhere on the page (:func:`random_action`).
- :class:`NearMissPolicy` (``--policy near-miss``): at each step, with probability ``epsilon``, the
  expert's own click or ``type`` aimed at *another element of the same role* (:func:`near_miss`): the
  wrong checkbox, tab, option or button, the password typed into the wrong field. These are the
  mistakes behind most of the judge's false successes on the policy's dreams (README, "The judge
  retrained on dreamed pages": 21 of 31 were a wrong click on a one-page task); a random action is
  rarely one, since it may be any kind of action on any element.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from dynaweb_env.actions import Action, ActionParseError, format_action, parse_action
from dynaweb_env.agent import format_policy_response
from dynaweb_env.experts import ExpertError, parse_axtree

from .policy import PolicyTurn, ScriptedExpertPolicy

#: The ``--policy`` value of the epsilon-greedy exploration policy.
EXPLORE_POLICY = "explore"

#: Roles a random click or hover may target (other nodes with an id, e.g. paragraphs, are rarely
#: interactive; they are used only when a page has none of these).
CLICKABLE_ROLES = frozenset(
    "button link checkbox radio textbox searchbox combobox option tab menuitem listitem image switch slider "
    "spinbutton treeitem cell row gridcell columnheader heading LabelText".split()
)
#: Roles a random ``type`` may target.
TYPABLE_ROLES = frozenset({"textbox", "searchbox", "combobox"})
#: Keys a random ``press`` sends.
RANDOM_KEYS = ("Enter", "Tab", "Escape", "ArrowDown", "ArrowUp", "Backspace", "Space")
#: Words a random ``type`` draws from when it does not take one from the goal.
RANDOM_WORDS = (
    "hello", "test", "alpha", "search", "submit", "yes", "no", "john", "london", "blue", "42", "2024",
    "password", "email", "open", "cancel", "next", "apple", "zero", "lorem",
)  # fmt: skip


def random_action(observation: Mapping[str, str], rng: np.random.Generator) -> tuple[str, str]:
    """A random valid action on the page of ``observation``, with a one-line reasoning.

    Clicks (60%), typing into a textbox (20%; a word of the goal or of :data:`RANDOM_WORDS`,
    with or without Enter), hovers (5%), scrolls (10%) and key presses (5%); an action kind the page
    offers no target for is replaced by a click, and a page without any element id gets a scroll.
    Never ``stop``: exploration ends by the task or the step limit.
    """
    nodes = [node for node in parse_axtree(observation.get("axtree", "")) if node.bid is not None]
    clickable = [node for node in nodes if node.role in CLICKABLE_ROLES] or nodes
    typable = [node for node in nodes if node.role in TYPABLE_ROLES]
    kind = rng.choice(["click", "type", "hover", "scroll", "press"], p=[0.6, 0.2, 0.05, 0.1, 0.05])
    if kind == "type" and not typable or kind in ("click", "hover") and not clickable:
        kind = "click" if clickable else "scroll"
    if kind == "scroll":
        direction = str(rng.choice(["down", "up"]))
        return f"Exploring: I scroll {direction} to see more of the page.", f"scroll [{direction}]"
    if kind == "press":
        key = str(rng.choice(RANDOM_KEYS))
        return f"Exploring: I press {key} to see what the page does.", f"press [{key}]"
    if kind == "type":
        box = typable[int(rng.integers(len(typable)))]
        goal_words = [word.strip(".,:;!?\"'()") for word in observation.get("goal", "").split()]
        goal_words = [word for word in goal_words if word.isalnum() and "[" not in word]
        pool = goal_words if goal_words and rng.random() < 0.5 else list(RANDOM_WORDS)
        text, enter = str(rng.choice(pool)), int(rng.integers(2))
        return f"Exploring: I type '{text}' into the {box.role} [{box.bid}].", f"type [{box.bid}] [{text}] [{enter}]"
    node = clickable[int(rng.integers(len(clickable)))]
    described = f"the {node.role} '{node.name}'" if node.name else f"the {node.role}"
    verb = "click" if kind == "click" else "hover"
    return f"Exploring: I {verb} {described} [{node.bid}] to see what it does.", f"{verb} [{node.bid}]"


class SeededMistakesPolicy(ScriptedExpertPolicy):
    """The scripted expert with mistakes drawn at each step with probability ``epsilon``.

    Every draw comes from a generator seeded by ``(seed, task, task seed, turn, stream)``, never by which
    browser runs the episode or in what order episodes finish, so a collection is reproducible however
    it is batched. Subclasses say what a mistake is.

    Args:
        tokenizer: The tokenizer of the episode encoding.
        epsilon: Probability of a mistake at each step.
        seed: Base seed of the draws.
        experts: Task id -> expert (default: every registered expert).
    """

    #: The ``--policy`` value; also the policy's ``model_name``.
    name = ""

    def __init__(self, tokenizer: Any, epsilon: float, seed: int = 0, experts: Mapping[str, Any] | None = None):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        super().__init__(tokenizer, experts)
        self.model_name = self.name
        self.epsilon, self.seed = epsilon, seed

    def rng(self, turn: PolicyTurn, stream: int = 0) -> np.random.Generator:
        """The generator of this episode's ``turn``; ``stream`` separates policies that share a seed."""
        task_seed = int(turn.info.get("task_seed", turn.options.get("task_seed", 0)))
        key = [self.seed, zlib.crc32(self.task_id(turn).encode()), task_seed, turn.turn]
        return np.random.default_rng(key + [stream] if stream else key)


class ExplorationPolicy(SeededMistakesPolicy):
    """The expert, replaced with probability ``epsilon`` by :func:`random_action` at each step.

    On a task without an expert, or a page the expert does not recognise (after a random action),
    every action is random.
    """

    name = EXPLORE_POLICY

    def respond(self, turn: PolicyTurn) -> str:
        rng = self.rng(turn)
        expert = self.experts.get(self.task_id(turn))
        if expert is not None and rng.random() >= self.epsilon:
            try:
                return expert.respond(turn.observation)
            except ExpertError:
                pass
        return format_policy_response(*random_action(turn.observation, rng))


#: The ``--policy`` value of the near-miss policy.
NEAR_MISS_POLICY = "near-miss"


def near_miss(observation: Mapping[str, str], action: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """``action`` (a ``click`` or ``type``) aimed at another element of the same role, with a one-line reasoning.

    The other element is drawn uniformly among the page's elements whose role is the target's (the
    text typed stays the same). ``None`` when the action is not a click or ``type``, its target is
    not on the page, or no other element shares its role: the caller keeps the expert's action.
    """
    try:
        parsed = parse_action(action)
    except ActionParseError:
        return None
    if parsed.name not in ("click", "type"):
        return None
    nodes = [node for node in parse_axtree(observation.get("axtree", "")) if node.bid is not None]
    target = next((node for node in nodes if node.bid == parsed.element_id), None)
    if target is None:
        return None
    others = [node for node in nodes if node.role == target.role and node.bid != target.bid]
    if not others:
        return None
    other = others[int(rng.integers(len(others)))]
    retargeted = format_action(Action(parsed.name, (other.bid, *parsed.args[1:])))
    described = f"the {other.role} '{other.name}'" if other.name else f"the {other.role}"
    if parsed.name == "click":
        return f"I click {described} [{other.bid}].", retargeted
    return f"I type '{parsed.arg('text')}' into {described} [{other.bid}].", retargeted


class NearMissPolicy(SeededMistakesPolicy):
    """The expert, whose click or ``type`` goes with probability ``epsilon`` to another element of the same role.

    A step whose action is neither, or whose target has no other element of its role on the page (the
    only button), keeps the expert's action: ``epsilon`` is the chance of *trying* a near miss. After a
    near miss the expert goes on from the page the mistake left, so an episode holds both mistakes it
    recovers from and mistakes that fail the task; the real browser says which. A page the expert does
    not recognise ends the episode with ``stop [N/A]``, as for :class:`ScriptedExpertPolicy`.
    """

    name = NEAR_MISS_POLICY
    #: Draws of a stream of their own: a near-miss and an exploration run of one seed make unrelated choices.
    RNG_STREAM = 1

    def respond(self, turn: PolicyTurn) -> str:
        expert = self.experts.get(self.task_id(turn))
        if expert is None:
            return super().respond(turn)
        try:
            reasoning, action = expert.act(turn.observation)
        except ExpertError:
            return super().respond(turn)
        rng = self.rng(turn, self.RNG_STREAM)
        near_miss_step = near_miss(turn.observation, action, rng) if rng.random() < self.epsilon else None
        return format_policy_response(*(near_miss_step or (reasoning, action)))


#: ``--policy`` value -> the exploring policy ``dynaweb-collect`` builds for it.
EXPLORING_POLICIES: dict[str, type[SeededMistakesPolicy]] = {
    EXPLORE_POLICY: ExplorationPolicy,
    NEAR_MISS_POLICY: NearMissPolicy,
}


__all__ = [
    "EXPLORING_POLICIES",
    "CLICKABLE_ROLES",
    "EXPLORE_POLICY",
    "NEAR_MISS_POLICY",
    "ExplorationPolicy",
    "NearMissPolicy",
    "SeededMistakesPolicy",
    "near_miss",
    "random_action",
]
