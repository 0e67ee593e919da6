"""Portable MiniWoB++ URLs: trajectory files name pages ``miniwob:///<task>.html``, never a machine's path.

A real MiniWoB++ page is a ``file://`` URL into the ``html/miniwob/`` directory of the installed
``miniwob`` package, or an ``http://`` URL when
``$MINIWOB_URL`` points at a served copy. Written as is, a recording would carry the recording
machine's install path, and on any other machine a dream started from it would show that path
while the real env shows another: a policy could tell a dream from the real thing by its URL.

So trajectory files store the portable form and readers resolve it for the machine they run on:

- :func:`portable_urls` (used by :func:`~dynaweb_env.data.io.write_trajectories`) turns every
  MiniWoB++ page URL into ``miniwob:///<page>``;
- :func:`resolve_urls` (used by every reader, :func:`~dynaweb_env.data.io.iter_trajectories`) turns
  ``miniwob:///<page>`` into the URL the real env would load here: ``$MINIWOB_URL`` when set (as
  BrowserGym reads it), else the installed package's pages. Without the ``miniwob`` package the
  portable form is kept.

Both work on any text, and are applied to every text field of a step: the URL inside a tree's root
line (``RootWebArea '...', url='...'``), a ``goto`` action, or a labelled ``changes`` that names the
next URL are rewritten with the step's ``url``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

#: The portable base of MiniWoB++ page URLs in trajectory files.
MINIWOB_SCHEME = "miniwob:///"
# A file:// URL of a page of an installed miniwob package, on any machine, up to the page name.
_RECORDED_BASE = re.compile(r"file://[^\s'\"]*?/miniwob/html/miniwob/")


def miniwob_pages_url() -> str | None:
    """The base URL MiniWoB++ pages load from on this machine (ends with ``/``), ``None`` if unknown.

    ``$MINIWOB_URL`` when set (BrowserGym appends ``<task>.html`` to it), else the ``file://`` URL
    of the installed ``miniwob`` package's pages. The package is located, not imported.
    """
    configured = os.environ.get("MINIWOB_URL")
    if configured:
        return configured
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    pages = Path(next(iter(spec.submodule_search_locations))).resolve() / "html" / "miniwob"
    return pages.as_uri() + "/" if pages.is_dir() else None


def portable_urls(text: str) -> str:
    """``text`` with every MiniWoB++ page URL written ``miniwob:///<page>``."""
    text = _RECORDED_BASE.sub(MINIWOB_SCHEME, text)
    base = os.environ.get("MINIWOB_URL")
    if base and base.endswith("/"):  # a served or checked-out copy, e.g. http://127.0.0.1:8080/miniwob/
        text = text.replace(base, MINIWOB_SCHEME)
    return text


def resolve_urls(text: str, base: str | None = None) -> str:
    """``text`` with ``miniwob:///<page>`` written as this machine's page URL.

    Args:
        text: Any text (a URL, a tree).
        base: The base to resolve to; default :func:`miniwob_pages_url`. Unchanged when there is none.
    """
    if MINIWOB_SCHEME not in text:
        return text
    base = base if base is not None else miniwob_pages_url()
    return text if base is None else text.replace(MINIWOB_SCHEME, base)


__all__ = ["MINIWOB_SCHEME", "miniwob_pages_url", "portable_urls", "resolve_urls"]
