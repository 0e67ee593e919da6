"""Scripted expert policies: demonstrations on real pages, read from the observation alone.

Experts produce the real expert trajectories DynaWeb interleaves with dream rollouts, and the
shipped start-state dataset (``dynaweb_env/data/builtin/miniwob_small.jsonl``).

Example:
    >>> from dynaweb_env.experts import EXPERTS, get_expert
    >>> sorted(EXPERTS)[:2]
    ['miniwob.click-button', 'miniwob.click-checkboxes']
    >>> reasoning, action = get_expert("miniwob.click-button").act(
    ...     {"goal": 'Click on the "ONE" button.', "url": "", "axtree": "\\t[13] button 'ONE'",
    ...      "last_action": "", "last_action_error": ""})
    >>> action
    'click [13]'
"""

from . import (  # noqa: F401  (registers them)
    miniwob,
    miniwob_clickable,
    miniwob_editor,
    miniwob_email,
    miniwob_long,
    miniwob_multistep,
)
from .base import (
    EXPERTS,
    AxNode,
    ExpertError,
    ExpertPolicy,
    PolicyLike,
    find_all_by_role,
    find_by_role_and_name,
    get_expert,
    last_action_targets,
    parse_axtree,
    quoted_strings,
    register_expert,
)

__all__ = [
    "EXPERTS",
    "AxNode",
    "ExpertError",
    "ExpertPolicy",
    "PolicyLike",
    "find_all_by_role",
    "find_by_role_and_name",
    "get_expert",
    "last_action_targets",
    "parse_axtree",
    "quoted_strings",
    "register_expert",
]
