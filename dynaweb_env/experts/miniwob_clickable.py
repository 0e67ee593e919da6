"""Scripted experts for MiniWoB++ tasks whose targets are clickable ``<span>``/``<div>`` elements or lists.

These tasks became solvable when the observation started keeping clickable generic elements with
their bids (``[13] generic, clickable=True``, its text in ``StaticText`` lines below it) and the
grammar gained ``select [id] [option]``:

* links rendered as ``<span>`` text: ``click-link``, ``click-tab-2`` (and ``-easy``, ``-medium``,
  ``-hard``), whose links hide in tabs, and ``click-collapsible-2``, whose links hide in an accordion;
* the movie search forms of ``multi-orderings`` and ``multi-layouts`` (fields in shuffled rows, five
  layouts, some with a ``<div>`` Submit button);
* ``choose-list``, a ``<select>`` drop-down;
* ``social-media-some`` and ``social-media-all``: press one button on several posts of one user. A
  pressed button looks the same in the tree, so the posts are pressed in page order and the last
  action tells how far the expert got.

The email-inbox family is :mod:`dynaweb_env.experts.miniwob_email`'s. Like every expert, these read
only the observation and are stateless.
"""

from __future__ import annotations

from .base import (
    AxNode,
    ExpertError,
    ExpertPolicy,
    fill_or_submit,
    find_all_by_role,
    goal_match,
    last_action_targets,
    register_expert,
)
from .miniwob_multistep import _children, _text


def is_clickable_generic(node: AxNode) -> bool:
    """Whether ``node`` is a clickable ``<span>``/``<div>`` the observation kept: a ``generic`` with a bid."""
    return node.role == "generic" and node.bid is not None


def clickables_with_text(nodes: list[AxNode], text: str, indices: list[int] | None = None) -> list[AxNode]:
    """The clickable generic elements whose text is ``text`` (among ``indices``, by default the whole page)."""
    positions = range(len(nodes)) if indices is None else indices
    return [nodes[i] for i in positions if is_clickable_generic(nodes[i]) and _text(nodes, i).strip() == text]


def clickable_submit(nodes: list[AxNode], names: tuple[str, ...]) -> AxNode | None:
    """The last button, or clickable generic element, whose text is one of ``names`` (a form's submit)."""
    found = None
    for index, node in enumerate(nodes):
        if node.bid is not None and (node.role == "button" or is_clickable_generic(node)):
            if _text(nodes, index).strip() in names:
                found = node
    return found


# ---------------------------------------------------------------------------- links


@register_expert
class ClickLinkExpert(ExpertPolicy):
    """``Click on the link "et".`` (links are ``<span>`` words inside a paragraph)"""

    task_id = "miniwob.click-link"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        word = goal_match(r'[Cc]lick on the link "(.*)"\.?$', observation["goal"].strip()).group(1)
        links = clickables_with_text(self.nodes(observation), word)
        link = self.require(links[0] if links else None, f"a link reading {word!r}", observation)
        return f"The link '{word}' is the clickable text [{link.bid}].", f"click [{link.bid}]"


class _HiddenLinkExpert(ExpertPolicy):
    """A link hidden in one of several panels: open the panels in order until the link shows, then click it.

    Only the open panel's content is in the tree, and panels open in page order, so the open panel
    tells which are done: the next one is the one after it.
    """

    #: The role of the panels' headers (``tab`` for both the tabs and the accordion's sections).
    HEADER = "tab"
    #: How the goal names the link.
    GOAL = r'click on the link "(.*)"\.?$'

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        word = goal_match(self.GOAL, observation["goal"].strip()).group(1)
        nodes = self.nodes(observation)
        headers = find_all_by_role(nodes, self.HEADER)
        if not headers:
            raise ExpertError(f"no {self.HEADER} headers on the page")
        panel_indices = [i for i, node in enumerate(nodes) if node.role == "tabpanel"]
        shown = [i for panel in panel_indices for i in _children(nodes, panel)]
        links = clickables_with_text(nodes, word, shown)
        if links:
            return f"The link '{word}' shows in the open panel, [{links[0].bid}].", f"click [{links[0].bid}]"
        opened = [index for index, header in enumerate(headers) if header.attributes.get("selected") == "True"]
        opened = [index for index in opened if headers[index].expanded] or opened
        following = opened[-1] + 1 if opened else 0
        if following >= len(headers):
            raise ExpertError(f"no panel shows the link {word!r}")
        header = headers[following]
        where = f"the open '{headers[opened[-1]].name}' does not show it" if opened else "every panel is closed"
        return (
            f"The link '{word}' is not shown ({where}); I open the next panel, '{header.name}' [{header.bid}].",
            f"click [{header.bid}]",
        )


@register_expert
class ClickTab2Expert(_HiddenLinkExpert):
    """``Switch between the tabs to find and click on the link "vel".`` (three tabs)"""

    task_id = "miniwob.click-tab-2"


@register_expert
class ClickTab2EasyExpert(_HiddenLinkExpert):
    """``click-tab-2`` with one tab."""

    task_id = "miniwob.click-tab-2-easy"


@register_expert
class ClickTab2MediumExpert(_HiddenLinkExpert):
    """``click-tab-2`` with two tabs."""

    task_id = "miniwob.click-tab-2-medium"


@register_expert
class ClickTab2HardExpert(_HiddenLinkExpert):
    """``click-tab-2`` with two to six tabs, named by number."""

    task_id = "miniwob.click-tab-2-hard"


@register_expert
class ClickCollapsible2Expert(_HiddenLinkExpert):
    """``Expand the sections below, to find and click on the link "vel".`` (an accordion of three sections)"""

    task_id = "miniwob.click-collapsible-2"


# ---------------------------------------------------------------------------- forms


#: The movie search fields, each by the words its labels start with across the five layouts.
_MOVIE_FIELDS = {"genre": ("Genre", "Movie Genre"), "director": ("Director",), "year": ("Year", "Released Date")}
_MOVIE_SUBMITS = ("Submit", "Search", "Go!")


class _MovieSearchExpert(ExpertPolicy):
    """``Search for crime movies directed by Holcomb from year 2010.``: three labelled fields, then submit.

    A field's label is the text just before it, except in the layout that writes labels after the
    fields (the page then starts with a field): the label is the text just after it.
    """

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        goal = observation["goal"].strip()
        genre, director, year = goal_match(r"Search for (.+?) movies directed by (.+?) from year (\d+)", goal).groups()
        wanted = {"genre": genre, "director": director, "year": year}
        nodes = self.nodes(observation)
        fields = self._fields(nodes)
        if set(fields) != set(wanted):
            raise ExpertError(f"found the fields {sorted(fields)}, expected genre, director and year")
        submit = self.require(clickable_submit(nodes, _MOVIE_SUBMITS), "the form's submit button", observation)
        order = sorted(fields, key=lambda key: nodes.index(fields[key]))
        return fill_or_submit([(fields[key], wanted[key]) for key in order], submit)

    @staticmethod
    def _fields(nodes: list[AxNode]) -> dict[str, AxNode]:
        sequence: list[tuple[str, AxNode | str]] = []
        for node in nodes:
            if node.role == "textbox" and node.bid is not None:
                sequence.append(("box", node))
            else:
                label = node.name.strip().rstrip(":")
                field = next((key for key, starts in _MOVIE_FIELDS.items() if label.startswith(starts)), None)
                if field is not None and node.role in ("StaticText", "rowheader", "LabelText"):
                    sequence.append(("label", field))
        labels_after = bool(sequence) and sequence[0][0] == "box"
        fields: dict[str, AxNode] = {}
        for position, (kind, box) in enumerate(sequence):
            if kind != "box":
                continue
            neighbour = position + 1 if labels_after else position - 1
            if 0 <= neighbour < len(sequence) and sequence[neighbour][0] == "label":
                fields[str(sequence[neighbour][1])] = box  # type: ignore[assignment]
        return fields


@register_expert
class MultiOrderingsExpert(_MovieSearchExpert):
    """The movie search form with its three rows shuffled and a ``<div>`` Submit button."""

    task_id = "miniwob.multi-orderings"


@register_expert
class MultiLayoutsExpert(_MovieSearchExpert):
    """The movie search form in one of five layouts (labels before or after, button or ``<div>`` submit)."""

    task_id = "miniwob.multi-layouts"


@register_expert
class ChooseListExpert(ExpertPolicy):
    """``Select Ertha from the list and click Submit.`` (a ``<select>`` drop-down)"""

    task_id = "miniwob.choose-list"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        item = goal_match(r"^Select (.+) from the list and click Submit", observation["goal"].strip()).group(1)
        nodes = self.nodes(observation)
        lists = find_all_by_role(nodes, "combobox")
        box = self.require(lists[0] if lists else None, "the drop-down list", observation)
        submit = self.button(nodes, "Submit", observation)
        if (box.value or "") != item:
            return f"The list [{box.bid}] shows {box.value!r}; I select {item!r}.", f"select [{box.bid}] [{item}]"
        return f"The list shows {item!r}; I click Submit [{submit.bid}].", f"click [{submit.bid}]"


# ---------------------------------------------------------------------------- social media

#: The four buttons under every post, in page order.
_POST_BUTTONS = ("Reply", "Retweet", "Like", "Share")


class _SocialMediaCountExpert(ExpertPolicy):
    """``Click the "Like" button on 2 posts by @kasie and then click Submit.`` (or ``on all posts``)

    A button toggles on each click and the tree does not show which are on, so the expert presses the
    user's posts in page order, one each, and reads from its last action which post it pressed last.
    """

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        label, amount, user = goal_match(
            r'Click the "([^"]+)" button on (all|\d+) posts? by (\S+?) and then click Submit', observation["goal"]
        ).groups()
        if label not in _POST_BUTTONS:
            raise ExpertError(f"unknown post button {label!r}")
        nodes = self.nodes(observation)
        targets = self._buttons(nodes, user, _POST_BUTTONS.index(label))
        if not targets:
            raise ExpertError(f"no post by {user} on the page")
        if amount != "all":
            targets = targets[: int(amount)]
        last = last_action_targets(observation, "click")
        done = next((index + 1 for index, button in enumerate(targets) if button.bid == last), 0)
        if done < len(targets):
            button = targets[done]
            return (
                f"{done} of the {len(targets)} posts by {user} have '{label}' pressed; next is [{button.bid}].",
                f"click [{button.bid}]",
            )
        submit = self.button(nodes, "Submit", observation)
        return f"'{label}' is pressed on {len(targets)} posts by {user}; I click Submit.", f"click [{submit.bid}]"

    @staticmethod
    def _buttons(nodes: list[AxNode], user: str, which: int) -> list[AxNode]:
        """Button number ``which`` of each post by ``user``: the ``which``-th image after the user's name."""
        buttons = []
        for index, node in enumerate(nodes):
            if node.role == "StaticText" and node.name == user:
                images = [later for later in nodes[index + 1 :] if later.role == "image" and later.bid is not None]
                if len(images) < len(_POST_BUTTONS):
                    raise ExpertError(f"a post by {user} shows {len(images)} buttons, expected {len(_POST_BUTTONS)}")
                buttons.append(images[which])
        return buttons


@register_expert
class SocialMediaSomeExpert(_SocialMediaCountExpert):
    """``Click the "Like" button on 2 posts by @sagittis and then click Submit.``"""

    task_id = "miniwob.social-media-some"


@register_expert
class SocialMediaAllExpert(_SocialMediaCountExpert):
    """``Click the "Reply" button on all posts by @cheree and then click Submit.``"""

    task_id = "miniwob.social-media-all"


__all__ = [
    "ChooseListExpert",
    "ClickCollapsible2Expert",
    "ClickLinkExpert",
    "ClickTab2EasyExpert",
    "ClickTab2Expert",
    "ClickTab2HardExpert",
    "ClickTab2MediumExpert",
    "MultiLayoutsExpert",
    "MultiOrderingsExpert",
    "SocialMediaAllExpert",
    "SocialMediaSomeExpert",
    "clickable_submit",
    "clickables_with_text",
    "is_clickable_generic",
]
