"""Scripted experts for the MiniWoB++ email inbox: reply, forward, delete and star, in plain and natural language.

The inbox lists one clickable row per email (sender, subject, start of the body, then a trash and a
star icon). A click on a row opens the email, with Reply and Forward buttons; those open a compose
view (a close and a send icon, then the recipient and the text). The expert reads which of the three
views is shown and does the next step:

* inbox: delete or star by the row's icons; otherwise open the sender's email;
* email: click Reply or Forward;
* compose: type the reply text, or the recipient of a forward (its text is filled in), then send.

The goal's wording is parsed against the task's own phrasings: four fixed sentences for
``email-inbox``, ``-forward``, ``-reply``, ``-star-reply`` and ``-noscroll``, and the templates the
natural-language variants draw from, read from the installed ``miniwob`` package (``NAME``, ``DEST``
and ``MSG`` mark the sender, the recipient of a forward and the reply text). A few of those templates
swap the names (``"Find the email from DEST and forward it to NAME."``): when two readings fit a goal
equally, the one whose template names the sender first is taken.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .base import AxNode, ExpertError, ExpertPolicy, find_all_by_role, register_expert
from .miniwob_clickable import is_clickable_generic
from .miniwob_multistep import _children

#: The phrasings of the plain tasks, in the templates' notation.
PLAIN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "reply": ('Find the email by NAME and reply to them with the text "MSG".',),
    "forward": ("Find the email by NAME and forward that email to DEST.",),
    "delete": ("Find the email by NAME and click the trash icon to delete it.",),
    "important": ("Find the email by NAME and click the star icon to mark it as important.",),
}

_FIELD_PATTERNS = {
    "NAME": r"(?P<name>[A-Z][\w-]*(?: [A-Z][\w-]*)??)",
    "DEST": r"(?P<dest>[A-Z][\w-]*(?: [A-Z][\w-]*)??)",
    "MSG": r"(?P<msg>.+?)",
}


@dataclass(frozen=True)
class EmailTask:
    """What a goal asks: ``action`` (``reply``, ``forward``, ``delete``, ``important``) on the email by ``sender``."""

    action: str
    sender: str
    recipient: str = ""
    text: str = ""


def _miniwob_html() -> Path:
    try:
        import miniwob
    except ImportError as error:  # pragma: no cover - the real env needs miniwob anyway
        raise ExpertError("the natural-language email experts read their phrasings from the miniwob package") from error
    return Path(miniwob.__file__).parent / "html"


@functools.cache
def turk_templates() -> dict[str, tuple[str, ...]]:
    """The phrasings of ``email-inbox-nl-turk`` and ``email-inbox-forward-nl-turk`` (train and test), by action."""
    source = (_miniwob_html() / "common" / "special" / "email-inbox-nl" / "templates.js").read_text()
    literal = re.sub(r",(\s*[\]}])", r"\1", source[source.index("{") : source.rindex("}") + 1])
    splits_by_action = json.loads(literal)
    return {action: tuple(t for split in splits.values() for t in split) for action, splits in splits_by_action.items()}


@functools.cache
def forward_nl_templates() -> dict[str, tuple[str, ...]]:
    """The phrasings of ``email-inbox-forward-nl`` (``NL_TEMPLATES`` and ``TEST_NL_TEMPLATES`` in its page)."""
    page = (_miniwob_html() / "miniwob" / "email-inbox-forward-nl.html").read_text()
    found = []
    for name in ("NL_TEMPLATES", "TEST_NL_TEMPLATES"):
        block = re.search(rf"\bvar {name} = \[(.*?)\];", page, re.S)
        if block is None:
            raise ExpertError(f"email-inbox-forward-nl.html has no {name}")
        found += re.findall(r"'([^']*)'", block.group(1))
    return {"forward": tuple(found)}


@functools.cache
def _compile(template: str) -> re.Pattern[str]:
    """A template as a pattern: its first ``NAME``/``DEST``/``MSG`` capture (the page replaces only the first)."""
    parts, seen = [], set()
    for piece in re.split(r"(NAME|DEST|MSG)", template.strip()):
        if piece in _FIELD_PATTERNS and piece not in seen:
            seen.add(piece)
            parts.append(_FIELD_PATTERNS[piece])
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def parse_email_goal(goal: str, templates: dict[str, tuple[str, ...]]) -> EmailTask:
    """The task a goal asks, by the templates it fits; the reading most templates give wins.

    Raises:
        ExpertError: If no template fits the goal.
    """
    goal = " ".join(goal.split())
    votes: Counter[EmailTask] = Counter()
    sender_first: set[EmailTask] = set()
    for action, phrasings in templates.items():
        for template in phrasings:
            match = _compile(template).fullmatch(goal)
            if match is None:
                continue
            fields = match.groupdict()
            task = EmailTask(action, fields["name"], fields.get("dest") or "", fields.get("msg") or "")
            votes[task] += 1
            if "DEST" not in template or template.index("NAME") < template.index("DEST"):
                sender_first.add(task)
    if not votes:
        raise ExpertError(f"the goal {goal!r} fits none of the task's phrasings")
    return max(votes, key=lambda task: (votes[task], task in sender_first))


class _EmailExpert(ExpertPolicy):
    """Reply, forward, delete or star the email a goal names, one view at a time (see the module docstring)."""

    def templates(self) -> dict[str, tuple[str, ...]]:
        return PLAIN_TEMPLATES

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        task = parse_email_goal(observation["goal"], self.templates())
        nodes = self.nodes(observation)
        compose = [i for i, node in enumerate(nodes) if node.role == "StaticText" and node.name.strip() == "to:"]
        if compose:
            return self._compose(observation, nodes, compose[0], task)
        buttons = {
            text: node
            for i, node in enumerate(nodes)
            if is_clickable_generic(node) and (text := _own_text(nodes, i)) in ("Reply", "Forward")
        }
        if buttons:
            wanted = "Reply" if task.action == "reply" else "Forward"
            if task.action not in ("reply", "forward") or wanted not in buttons:
                raise ExpertError(f"an email is open, but the task is to {task.action} one from the inbox")
            return f"The email is open; '{wanted}' [{buttons[wanted].bid}] starts the {task.action}.", (
                f"click [{buttons[wanted].bid}]"
            )
        return self._inbox(observation, nodes, task)

    def _inbox(self, observation: dict[str, str], nodes: list[AxNode], task: EmailTask) -> tuple[str, str]:
        for index, row in enumerate(nodes):
            if not is_clickable_generic(row):
                continue
            below = _children(nodes, index)
            texts = [nodes[i].name.strip() for i in below if nodes[i].role == "StaticText" and nodes[i].name.strip()]
            if not texts or texts[0] != task.sender:
                continue
            if task.action in ("reply", "forward"):
                return f"The email by {task.sender} is the row [{row.bid}]; I open it.", f"click [{row.bid}]"
            icons = [nodes[i] for i in below if nodes[i].role == "image" and nodes[i].bid is not None]
            if len(icons) < 2:
                raise ExpertError(f"the email by {task.sender} shows {len(icons)} icons, expected trash and star")
            icon, name = (icons[-2], "trash") if task.action == "delete" else (icons[-1], "star")
            why = f"The row of the email by {task.sender} ends in a trash and a star icon; the {name} is [{icon.bid}]."
            return why, f"click [{icon.bid}]"
        raise ExpertError(f"no email by {task.sender!r} in the inbox")

    def _compose(self, observation: dict[str, str], nodes: list[AxNode], to: int, task: EmailTask) -> tuple[str, str]:
        if task.action not in ("reply", "forward"):
            raise ExpertError(f"a compose view is open, but the task is to {task.action} an email")
        icons = [node for node in nodes[:to] if node.role == "image" and node.bid is not None]
        send = self.require(icons[-1] if icons else None, "the send icon", observation)
        boxes = find_all_by_role(nodes, "textbox")
        if task.action == "reply":
            box = self.require(boxes[-1] if boxes else None, "the reply's text field", observation)
            field, text = box, task.text
        else:
            after = [box for box in boxes if nodes.index(box) > to]
            field = self.require(after[0] if after else None, "the forward's recipient field", observation)
            text = task.recipient
        if (field.value or "") != text:
            return f"The {task.action} needs {text!r} in [{field.bid}]; I type it.", f"type [{field.bid}] [{text}] [0]"
        return f"The {task.action} is ready; the send icon is [{send.bid}].", f"click [{send.bid}]"


def _own_text(nodes: list[AxNode], index: int) -> str:
    """The joined text of a node's ``StaticText`` descendants."""
    return " ".join(nodes[i].name.strip() for i in _children(nodes, index) if nodes[i].role == "StaticText").strip()


@register_expert
class EmailInboxExpert(_EmailExpert):
    """``Find the email by Carlynne and reply to them with the text "Ornare commodo.".`` (or forward, delete, star)"""

    task_id = "miniwob.email-inbox"


@register_expert
class EmailInboxForwardExpert(_EmailExpert):
    """``Find the email by Hazel and forward that email to Alfi.``"""

    task_id = "miniwob.email-inbox-forward"


@register_expert
class EmailInboxReplyExpert(_EmailExpert):
    """``Find the email by Hazel and reply to them with the text "Morbi.".``"""

    task_id = "miniwob.email-inbox-reply"


@register_expert
class EmailInboxStarReplyExpert(_EmailExpert):
    """``email-inbox`` with star and reply tasks only."""

    task_id = "miniwob.email-inbox-star-reply"


@register_expert
class EmailInboxNoscrollExpert(_EmailExpert):
    """``email-inbox`` with a shorter inbox."""

    task_id = "miniwob.email-inbox-noscroll"


@register_expert
class EmailInboxForwardNlExpert(_EmailExpert):
    """``Anne wants the email Laetitia sent to you.`` (forward, in one of 31 phrasings)"""

    task_id = "miniwob.email-inbox-forward-nl"

    def templates(self) -> dict[str, tuple[str, ...]]:
        return forward_nl_templates()


@register_expert
class EmailInboxForwardNlTurkExpert(_EmailExpert):
    """``Send the email from Chrysa to Misty.`` (forward, in crowd-written phrasings, up to 12 emails)"""

    task_id = "miniwob.email-inbox-forward-nl-turk"

    def templates(self) -> dict[str, tuple[str, ...]]:
        return {"forward": turk_templates()["forward"]}


@register_expert
class EmailInboxNlTurkExpert(_EmailExpert):
    """``Please mark all emails by Janette as important.`` (any of the four actions, crowd-written phrasings)"""

    task_id = "miniwob.email-inbox-nl-turk"

    def templates(self) -> dict[str, tuple[str, ...]]:
        return turk_templates()


__all__ = [
    "PLAIN_TEMPLATES",
    "EmailInboxExpert",
    "EmailInboxForwardExpert",
    "EmailInboxForwardNlExpert",
    "EmailInboxForwardNlTurkExpert",
    "EmailInboxNlTurkExpert",
    "EmailInboxNoscrollExpert",
    "EmailInboxReplyExpert",
    "EmailInboxStarReplyExpert",
    "EmailTask",
    "forward_nl_templates",
    "parse_email_goal",
    "turk_templates",
]
