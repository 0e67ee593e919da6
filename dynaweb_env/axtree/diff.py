"""Structural diff of two accessibility trees: the free, deterministic description of Δ(o_t, o_{t+1}).

:func:`structural_diff` matches the nodes of two flattened trees by bid and writes what changed as
short sentences, e.g. ``"The checkbox [15] 'foo' became checked. A new StaticText [22] 'Done'
appeared. URL unchanged."`` It labels real transitions for world-model training
(:mod:`dynaweb_env.world_model.state_changes`) and describes patch-mode predictions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .nodes import AxNode, axtree_title, nodes_by_bid, parse_axtree, quote_text

#: Default length cap of a structural-diff description (characters).
DEFAULT_DIFF_MAX_CHARS = 800
#: Fraction of the old page's nodes that must be gone (or now be other elements) for the page to count as replaced.
REPLACED_FRACTION = 0.6


_STATE_WORDS: dict[str, dict[str, str]] = {
    "checked": {"true": "became checked", "false": "became unchecked", "mixed": "became partially checked"},
    "selected": {"true": "became selected", "false": "was deselected"},
    "expanded": {"true": "expanded", "false": "collapsed"},
    "pressed": {"true": "became pressed", "false": "was released"},
    "disabled": {"true": "became disabled", "false": "became enabled"},
    "focused": {"true": "received focus", "false": "lost focus"},
    "hidden": {"true": "became hidden", "false": "became visible"},
}


def _state(value: str | None) -> str:
    return "false" if value is None else value.strip().lower()


def _node_change_phrases(before: AxNode, after: AxNode) -> list[str]:
    phrases = []
    if before.role != after.role:
        phrases.append(f"became a {after.role}")
    if before.name != after.name:
        phrases.append(f"now reads {quote_text(after.name)}" if after.name else "lost its text")
    if before.value != after.value:
        phrases.append(f"now has value {quote_text(after.value)}" if after.value else "was cleared")
    for key in sorted(set(before.attributes) | set(after.attributes)):
        old, new = before.attributes.get(key), after.attributes.get(key)
        if old == new:
            continue
        if key in _STATE_WORDS:
            word = _STATE_WORDS[key].get(_state(new))
            if word:
                phrases.append(word)
                continue
        if new is None:
            phrases.append(f"lost its {key} property")
        elif new == "True" and old is None:
            phrases.append(f"gained {key}")
        else:
            phrases.append(f"{key} changed to {quote_text(new, 40)}")
    return phrases


def _join(phrases: list[str]) -> str:
    if len(phrases) <= 1:
        return "".join(phrases)
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _url_sentence(before_url: str, after_url: str) -> str:
    if before_url.strip() == after_url.strip():
        return "URL unchanged."
    if not after_url.strip():
        return "The URL is unknown."
    return f"The URL changed to {after_url.strip()[:300]}."


def _listing(nodes: Sequence[AxNode], limit: int) -> str:
    shown = [node.describe() for node in nodes[:limit]]
    more = f" and {len(nodes) - limit} more" if len(nodes) > limit else ""
    return ", ".join(shown) + more


def structural_diff(
    before_axtree: str,
    after_axtree: str,
    before_url: str = "",
    after_url: str = "",
    *,
    max_chars: int = DEFAULT_DIFF_MAX_CHARS,
    max_items: int = 6,
) -> str:
    """Describe how a page changed between two flattened accessibility trees.

    Nodes are matched by bid. Nodes whose line changed are described by what changed (checked,
    value, name, focus...); nodes that appear or disappear are listed; lines without a bid (most
    ``StaticText``) are compared as a multiset of texts. When most of the old page's nodes are gone
    or changed, the page is described as replaced wholesale. The URL change always closes the
    description.

    Args:
        before_axtree: The tree before the action.
        after_axtree: The tree after the action.
        before_url: The URL before the action.
        after_url: The URL after the action.
        max_chars: Length cap of the whole description; sentences past it are summarised as a count.
        max_items: Most nodes named in one "appeared"/"disappeared" sentence.

    Returns:
        A concise natural-language description, deterministic for given inputs.

    Example:
        >>> structural_diff("RootWebArea 'T'\\n\\t[15] checkbox 'foo', checked='false'",
        ...                 "RootWebArea 'T'\\n\\t[15] checkbox 'foo', checked='true'\\n\\t[22] StaticText 'Done'")
        "The checkbox [15] 'foo' became checked. A new StaticText [22] 'Done' appeared. URL unchanged."
    """
    if max_chars < 80:
        raise ValueError(f"max_chars must be >= 80, got {max_chars}")
    url_sentence = _url_sentence(before_url, after_url)
    before_keyed, before_free = nodes_by_bid(parse_axtree(before_axtree))
    after_keyed, after_free = nodes_by_bid(parse_axtree(after_axtree))
    if not after_keyed and not after_free:
        return _cap(["The page became empty."], url_sentence, max_chars)

    removed = [node for bid, node in before_keyed.items() if bid not in after_keyed]
    added = [node for bid, node in after_keyed.items() if bid not in before_keyed]
    changed = [
        (node, after_keyed[bid])
        for bid, node in before_keyed.items()
        if bid in after_keyed and node.content() != after_keyed[bid].content()
    ]
    title_after = axtree_title(after_axtree)
    # Replaced wholesale: most old elements are gone or are now different elements (role or name
    # changed under the same bid, as when a new document reuses ids). State changes do not count.
    lost = len(removed) + sum((old.role, old.name) != (new.role, new.name) for old, new in changed)
    if (
        before_keyed
        and after_keyed
        and lost / len(before_keyed) > REPLACED_FRACTION
        and (len(before_keyed) >= 3 or lost == len(before_keyed))
    ):
        return _cap(_replaced_sentences(title_after, after_keyed, max_items), url_sentence, max_chars)

    sentences: list[str] = []
    if axtree_title(before_axtree) != title_after and title_after:
        sentences.append(f"The page title changed to {quote_text(title_after)}.")
    for before, after in changed:
        phrases = _node_change_phrases(before, after)
        if phrases:
            sentences.append(f"The {before.describe()} {_join(phrases)}.")
    sentences += _count_sentences(added, "A new {} appeared.", "{} new elements appeared: {}.", max_items)
    sentences += _count_sentences(removed, "The {} disappeared.", "{} elements disappeared: {}.", max_items)
    sentences += _free_text_sentences(before_free, after_free, max_items)
    if not sentences:
        sentences.append("No visible change on the page.")
    return _cap(sentences, url_sentence, max_chars)


def _replaced_sentences(title: str, after_keyed: dict[str, AxNode], max_items: int) -> list[str]:
    named = f" {quote_text(title)}" if title else ""
    sentences = [f"The page was replaced by a new page{named} with {len(after_keyed)} elements."]
    interactive = [node for node in after_keyed.values() if node.role not in ("StaticText", "generic")]
    if interactive:
        sentences.append(f"It shows {_listing(interactive, max_items)}.")
    return sentences


def _count_sentences(nodes: list[AxNode], one: str, many: str, max_items: int) -> list[str]:
    if len(nodes) == 1:
        return [one.format(nodes[0].describe())]
    return [many.format(len(nodes), _listing(nodes, max_items))] if nodes else []


def _free_text_sentences(before_free: list[AxNode], after_free: list[AxNode], max_items: int) -> list[str]:
    # Lines without a bid (most StaticText) are compared as a multiset of texts.
    free_before = Counter(node.name for node in before_free if node.name and node.role != "RootWebArea")
    free_after = Counter(node.name for node in after_free if node.name and node.role != "RootWebArea")
    sentences = []
    for texts, opening in (
        (list((free_after - free_before).elements()), "New text appeared"),
        (list((free_before - free_after).elements()), "Text disappeared"),
    ):
        if texts:
            shown = ", ".join(quote_text(text) for text in texts[:max_items])
            more = f" and {len(texts) - max_items} more" if len(texts) > max_items else ""
            sentences.append(f"{opening}: {shown}{more}.")
    return sentences


def _cap(sentences: list[str], closing: str, max_chars: int) -> str:
    budget = max_chars - len(closing) - 1
    kept: list[str] = []
    used = 0
    for index, sentence in enumerate(sentences):
        remaining = len(sentences) - index
        # Reserve room for the "(N more changes.)" note if anything would be left out.
        reserve = 0 if remaining == 1 else 24
        if used + len(sentence) + 1 > budget - reserve:
            if not kept:  # a single overlong sentence: cut it rather than drop everything
                kept.append(sentence[: max(budget - 26, 20)].rstrip() + "….")
                remaining -= 1
            if remaining > 0:
                kept.append(f"({remaining} more changes.)")
            break
        kept.append(sentence)
        used += len(sentence) + 1
    return " ".join([*kept, closing])


__all__ = ["DEFAULT_DIFF_MAX_CHARS", "REPLACED_FRACTION", "structural_diff"]
