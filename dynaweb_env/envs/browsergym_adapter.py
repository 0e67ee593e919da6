"""What ``RealWeb-v0`` needs from BrowserGym: its env, its action calls, and bounds on what it extracts.

* :func:`make_browser_env` builds a BrowserGym env whose element timeout is settable and whose
  observations are bounded: a page with more than ``max_page_elements`` elements is not extracted
  at all (BrowserGym's full DOM snapshot and accessibility tree of a 300,000-button page took minutes
  and over a gigabyte), and :func:`bounded_axtree` keeps at most :data:`MAX_AXTREE_NODES` nodes,
  :data:`MAX_AXTREE_DEPTH` deep, before the tree is flattened to text.
* :func:`to_browsergym_call` translates a parsed action to BrowserGym's high-level action code.
* :class:`InMemoryChat` stands in for BrowserGym's chat window when nobody watches it.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym

from ..action_rules import normalize_key_combination
from ..action_spec import ACTION_SPECS
from ..actions import Action
from ..compat import browsergym as compat_browsergym
from .browser import setup_miniwob_url

#: Most accessibility-tree nodes kept before flattening (the text is cut to the observation limit after).
MAX_AXTREE_NODES = 20_000
#: Deepest accessibility-tree level kept (BrowserGym flattens recursively).
MAX_AXTREE_DEPTH = 200
#: Default most elements a page may have for its observation to be extracted. BrowserGym's
#: extraction grows faster than the page: here 3,000 buttons took 6 s, 10,000 took 21 s and 360 MB of Python memory,
#: 40,000 took 145 s and 1.2 GB, past the step watchdog (2 shared CPU cores).
MAX_PAGE_ELEMENTS = 20_000

_COUNT_ELEMENTS_JS = "() => document.getElementsByTagName('*').length"


def to_browsergym_call(action: Action, viewport_height: int) -> str:
    """BrowserGym's high-level action code for ``action`` (its spec's ``browsergym``; ``scroll`` moves 90% of
    ``viewport_height``)."""
    return ACTION_SPECS[action.name].browsergym(action.args, viewport_height)


def bounded_axtree(axtree_object: dict, max_nodes: int = MAX_AXTREE_NODES, max_depth: int = MAX_AXTREE_DEPTH):
    """The first ``max_nodes`` nodes of an accessibility tree in page order, at most ``max_depth`` deep.

    Returns:
        ``(tree, nodes_cut)``: the tree (``axtree_object`` itself when nothing is cut) and how many
        nodes were left out.
    """
    nodes = axtree_object.get("nodes") or []
    if not nodes:
        return axtree_object, 0
    index = {node["nodeId"]: position for position, node in enumerate(nodes)}
    kept: list[int] = []
    seen: set[int] = set()
    stack = [(0, 0)]
    while stack and len(kept) < max_nodes:
        position, depth = stack.pop()
        if position in seen:  # a malformed tree may list a child twice
            continue
        seen.add(position)
        kept.append(position)
        if depth < max_depth:
            children = [index[child] for child in nodes[position].get("childIds", ()) if child in index]
            stack.extend((child, depth + 1) for child in reversed(children))
    if len(kept) == len(nodes):
        return axtree_object, 0
    kept_ids = {nodes[position]["nodeId"] for position in kept}
    pruned = [
        {**nodes[position], "childIds": [c for c in nodes[position].get("childIds", ()) if c in kept_ids]}
        for position in kept
    ]
    return {**axtree_object, "nodes": pruned}, len(nodes) - len(kept)


#: The property that marks a kept clickable ``generic`` node: its line reads ``[13] generic, clickable=True``.
CLICKABLE_PROPERTY = {"name": "clickable", "value": {"type": "boolean", "value": True}}


def mark_clickable_generics(axtree_object: dict, extra_properties: dict | None) -> tuple[dict, int]:
    """The tree with every clickable ``generic`` node (a ``<span>``/``<div>`` with a click handler) marked.

    BrowserGym's flattening drops a ``generic`` node that has no properties, bid and all, even with
    ``with_clickable=True`` (it tests the node's own properties before adding ``clickable``), so a link
    drawn as a ``<span>`` or a ``<div>`` Submit button could not be clicked by id. Giving such a node the
    property :data:`CLICKABLE_PROPERTY` keeps it, with its bid; no other node changes.

    Args:
        axtree_object: BrowserGym's ``axtree_object`` (not modified).
        extra_properties: BrowserGym's ``extra_element_properties`` (``bid -> {"clickable": bool, ...}``).

    Returns:
        ``(tree, marked)``: the tree (``axtree_object`` itself when nothing is marked) and how many nodes were.
    """
    extra_properties = extra_properties or {}
    nodes = axtree_object.get("nodes") or []
    marked = 0
    kept = []
    for node in nodes:
        bid = node.get("browsergym_id")
        if (
            bid is not None
            and node.get("role", {}).get("value") == "generic"
            and extra_properties.get(bid, {}).get("clickable")
        ):
            node = {**node, "properties": [*node.get("properties", []), CLICKABLE_PROPERTY]}
            marked += 1
        kept.append(node)
    return ({**axtree_object, "nodes": kept} if marked else axtree_object), marked


def flatten_axtree(
    axtree_object: dict, extra_properties: dict | None = None, clickable: bool = True
) -> tuple[str, int]:
    """BrowserGym's flattened text of a bounded accessibility tree, and how many nodes were cut.

    This is the one rule by which a real page becomes the ``axtree`` the policy, the world model and the
    judge read (``RealWeb-v0``, and through it data collection and dream start states).

    Args:
        axtree_object: BrowserGym's ``axtree_object``.
        extra_properties: BrowserGym's ``extra_element_properties``; needed when ``clickable``.
        clickable: Keep clickable ``generic`` nodes with their bids (:func:`mark_clickable_generics`);
            ``False`` gives BrowserGym's default flattening, which drops them.
    """
    from browsergym.utils.obs import flatten_axtree_to_str

    tree, nodes_cut = bounded_axtree(axtree_object)
    if clickable:
        tree, _ = mark_clickable_generics(tree, extra_properties)
    return flatten_axtree_to_str(tree), nodes_cut


class InMemoryChat:
    """BrowserGym's ``Chat`` without its browser window: the messages exchanged with the task.

    Tasks read these messages to validate answers (``stop [answer]`` is sent as an assistant
    message), so they are kept exactly as BrowserGym's chat keeps them.
    """

    ROLES = ("user", "user_image", "assistant", "info", "infeasible")

    def __init__(self, *args: Any, **kwargs: Any):
        self.messages: list[dict[str, Any]] = []

    def add_message(self, role: str, msg: str) -> None:
        if role not in self.ROLES:
            raise ValueError(f"Invalid role: {role}")
        if role != "info":
            self.messages.append({"role": role, "timestamp": time.time(), "message": msg})

    def wait_for_user_message(self) -> None:
        raise RuntimeError("waiting for a user message needs BrowserGym's chat window: use headless=False")

    def close(self) -> None:
        pass


_chat_choice = threading.local()  # .in_memory: the calling thread's envs keep their chat in memory


def _choose_chat(*args: Any, **kwargs: Any) -> Any:
    from browsergym.core.chat import Chat

    return (InMemoryChat if getattr(_chat_choice, "in_memory", False) else Chat)(*args, **kwargs)


@contextmanager
def in_memory_chat(enabled: bool) -> Iterator[None]:
    """Make BrowserGym envs reset on the calling thread keep their chat in memory (``enabled``) or open its window."""
    compat_browsergym.set_chat_factory(_choose_chat)  # the choice is per thread, so envs on threads agree
    previous, _chat_choice.in_memory = getattr(_chat_choice, "in_memory", False), enabled
    try:
        yield
    finally:
        _chat_choice.in_memory = previous


def check_task_id(task_id: str) -> None:
    """Raise ``ValueError`` unless ``task_id`` names a registered BrowserGym task (importing its benchmark)."""
    if not isinstance(task_id, str) or "." not in task_id:
        raise ValueError(f"task must be a BrowserGym task id such as 'miniwob.click-button', got {task_id!r}")
    benchmark = task_id.split(".", 1)[0]
    if benchmark == "miniwob":
        setup_miniwob_url()
    try:
        importlib.import_module(f"browsergym.{benchmark}")
    except ImportError as error:
        raise ValueError(
            f"task {task_id!r} needs the BrowserGym benchmark package browsergym-{benchmark} "
            f"(pip install browsergym-{benchmark}; see its docs for the sites it needs): {error}"
        ) from None
    if f"browsergym/{task_id}" not in gym.registry:
        raise ValueError(f"unknown BrowserGym task {task_id!r}")


def check_real_env_arguments(
    task_ids: list[str],
    tasks: Any,
    max_steps: Any,
    allowed_domains: Any,
    action_timeout_ms: Any,
    element_timeout_ms: Any,
    seconds: tuple[float, float, float],
    counts: tuple[Any, Any],
) -> None:
    """Check ``RealWeb-v0``'s constructor arguments before any browser starts.

    Raises:
        ValueError: Naming the first bad argument and its value.
    """
    if tasks is not None and (isinstance(tasks, str) or not tasks or not all(isinstance(t, str) for t in tasks)):
        raise ValueError(f"tasks must be a non-empty list of task ids, got {tasks!r}")
    for task_id in task_ids:
        check_task_id(task_id)
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if allowed_domains is not None and (
        isinstance(allowed_domains, str) or not all(isinstance(d, str) and d for d in allowed_domains)
    ):
        raise ValueError(f"allowed_domains must be a list of non-empty strings, got {allowed_domains!r}")
    if action_timeout_ms is not None and action_timeout_ms <= 0:
        raise ValueError(f"action_timeout_ms must be positive, got {action_timeout_ms}")
    if not isinstance(element_timeout_ms, int) or element_timeout_ms <= 0:
        raise ValueError(f"element_timeout_ms must be a positive integer, got {element_timeout_ms!r}")
    step_timeout_s, reset_timeout_s, pre_observation_delay = seconds
    if step_timeout_s <= 0 or reset_timeout_s <= 0:
        raise ValueError(f"timeouts must be positive, got {step_timeout_s=} and {reset_timeout_s=}")
    if pre_observation_delay < 0:
        raise ValueError(f"pre_observation_delay must be >= 0, got {pre_observation_delay}")
    for name, value in zip(("max_tabs", "max_page_elements"), counts, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def make_browser_env(
    task_id: str, element_timeout_ms: int = 2000, max_page_elements: int = MAX_PAGE_ELEMENTS, **kwargs: Any
) -> Any:
    """BrowserGym's env for ``task_id`` with DynaWeb's action set, element timeout and page-size bound."""
    from browsergym.core.action.highlevel import HighLevelActionSet

    action_set = HighLevelActionSet(subsets=["chat", "infeas", "bid", "coord", "nav", "tab"], strict=True)

    def to_python_code(action: str) -> str:
        return compat_browsergym.set_element_timeout(action_set.to_python_code(action), element_timeout_ms)

    env = gym.make(f"browsergym/{task_id}", disable_env_checker=True, action_mapping=to_python_code, **kwargs).unwrapped

    def bounded(full_extraction: Callable[[], dict]) -> Callable[[], dict]:
        def bounded_extraction() -> dict:
            # Counting elements is one DOM call; extracting a huge page is what must not happen.
            try:
                elements = int(env.page.evaluate(_COUNT_ELEMENTS_JS))
            except Exception:  # noqa: BLE001 - a page in the middle of navigating: BrowserGym's own retries handle it
                elements = 0
            if elements <= max_page_elements:
                return full_extraction()
            return _oversized_page_observation(env, elements, max_page_elements)

        return bounded_extraction

    compat_browsergym.wrap_observation(env, bounded)
    return env


def _oversized_page_observation(env: Any, elements: int, limit: int) -> dict:
    title = env.page.title()[:200]
    note = f"this page has {elements} elements, more than the {limit} an observation may show"
    return {
        "goal": compat_browsergym.legacy_goal(env.goal_object),
        "url": env.page.url,
        "axtree_text": f"RootWebArea {title!r}\n\tStaticText {note!r}",
        "last_action_error": env.last_action_error,
        "open_pages_urls": tuple(page.url for page in env.context.pages),
    }


__all__ = [
    "MAX_AXTREE_DEPTH",
    "MAX_AXTREE_NODES",
    "MAX_PAGE_ELEMENTS",
    "CLICKABLE_PROPERTY",
    "InMemoryChat",
    "bounded_axtree",
    "check_task_id",
    "check_real_env_arguments",
    "flatten_axtree",
    "in_memory_chat",
    "make_browser_env",
    "mark_clickable_generics",
    "normalize_key_combination",
    "to_browsergym_call",
]
