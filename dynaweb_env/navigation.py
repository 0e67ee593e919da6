"""Where an agent may navigate: the one URL policy of RealWeb-v0 and DreamWeb-v0.

A task may be left only for the places it lives in: its web sites (hosts, optionally with a port)
and, for local pages such as MiniWoB++, the directory its start page lies in. What a page loads
(frames, images, scripts, XHR, WebSockets) is held to the same places, and local pages may also load
from the directory above their own (:meth:`NavigationPolicy.allows_resource`): RealWeb-v0 enforces it
on every request inside Chromium (:mod:`dynaweb_env.envs.browser_guard`). Loopback and private
addresses are places like any other: reached only when they are the task's own host. Everything else is
refused: other hosts (cloud metadata addresses included), other local files and directory
listings (``file:///etc/passwd``, ``file:///``), pages an agent could write itself (``data:``,
``blob:``, ``javascript:``), browser pages (``chrome://``, ``about:`` other than ``about:blank``),
and any URL with control characters or whitespace in it.

Both envs ask :meth:`NavigationPolicy.refusal` and show its message verbatim as
``last_action_error``, so a policy cannot tell a dream from the real web by what it is refused.

Example:
    >>> policy = NavigationPolicy.for_start_url("file:///pages/miniwob/click-button.html")
    >>> policy.refusal("file:///pages/miniwob/click-dialog.html")
    ''
    >>> policy.refusal("file:///etc/passwd")
    'navigation to file:///etc/passwd refused: outside the allowed domains (file:///pages/miniwob/)'
"""

from __future__ import annotations

import ipaddress
import posixpath
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

#: The scheme of MiniWoB++ pages in trajectory files (``miniwob:///<page>``, see :mod:`dynaweb_env.data.urls`);
#: a dream started from one read without the ``miniwob`` package keeps it.
PORTABLE_SCHEME = "miniwob"
#: Longest part of a refused URL repeated in the message.
MAX_SHOWN_URL_LENGTH = 200

# Pages every tab may show without having been navigated to: a new tab is blank.
_BLANK_PAGES = ("about:blank",)


def url_in_domains(url: str, domains: Sequence[str]) -> bool:
    """Whether an ``http(s)`` URL lies on one of ``domains`` (hosts or ``host:port``; a host admits its subdomains).

    Args:
        url: An absolute URL.
        domains: Hosts such as ``"example.com"`` or ``"localhost:7770"`` (a scheme prefix is ignored).
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return False
    try:
        port = parts.port
    except ValueError:  # a port that is not a number
        return False
    host = (parts.hostname or "").lower()
    for domain_host, domain_port in _domain_parts(domains):
        if domain_port and str(port or {"http": 80, "https": 443}[scheme]) != domain_port:
            continue
        # An address has no subdomains: 127.0.0.1 must not pass as a subdomain of "0.0.1".
        subdomain = host.endswith("." + domain_host) and not _is_ip_address(host) and not _is_ip_address(domain_host)
        if host and (host == domain_host or subdomain):
            return True
    return False


def _domain_parts(domains: Sequence[str]) -> list[tuple[str, str]]:
    """``(host, port or "")`` of each of ``domains`` (``"host"``, ``"host:port"``, a scheme prefix ignored)."""
    parts = []
    for domain in domains:
        domain = domain.lower()
        if "://" in domain:
            domain = urlsplit(domain).netloc or domain
        if domain.startswith("["):  # an IPv6 address, "[::1]:8080"
            host, _, port = domain[1:].partition("]")
            parts.append((host, port.lstrip(":")))
        else:
            host, _, port = domain.partition(":")
            parts.append((host, port))
    return parts


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def proxy_bypass_rules(domains: Sequence[str]) -> str:
    """``domains`` as Chromium's proxy bypass list (Playwright's ``proxy["bypass"]``): the same hosts, subdomains
    and ports :func:`url_in_domains` admits, so that only they are reached directly.

    Example:
        >>> proxy_bypass_rules(["example.com", "localhost:7770"])
        'example.com,.example.com,localhost:7770'
    """
    rules: list[str] = []
    for host, port in _domain_parts(domains):
        if not host:
            continue
        shown = f"[{host}]" if ":" in host else host
        suffix = f":{port}" if port else ""
        rules.append(shown + suffix)
        if not _is_ip_address(host) and host != "localhost":
            rules.append(f".{host}{suffix}")
    return ",".join(rules)


def absolute_url(url: str, base_url: str = "") -> str:
    """``url`` resolved against ``base_url`` when it has no scheme of its own (as a browser resolves a link)."""
    try:
        if not base_url or urlsplit(url).scheme:
            return url
        if urlsplit(base_url).scheme == PORTABLE_SCHEME:  # urljoin resolves only schemes it knows
            return PORTABLE_SCHEME + urljoin("file" + base_url[len(PORTABLE_SCHEME) :], url)[len("file") :]
        return urljoin(base_url, url)
    except ValueError:  # not a URL at all, e.g. "http://[::1"
        return url


# Unicode categories refused in a URL: controls (C0 and C1), invisible format characters (bidi overrides
# such as U+202E, zero-width joiners), surrogates, and every kind of space or line separator.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})
# Schemes whose URLs a browser parses as "special" (WHATWG URL standard): a backslash is a path separator.
_SPECIAL_SCHEMES = ("http", "https", "file", "ws", "wss", "ftp", PORTABLE_SCHEME)


def _has_control_characters(url: str) -> bool:
    return any(
        ord(char) < 0x21
        or ord(char) == 0x7F
        or (ord(char) > 0x7F and unicodedata.category(char) in _INVISIBLE_CATEGORIES)
        for char in url
    )


def _as_browser_parses(url: str) -> str:
    """``url`` with backslashes before its query turned into slashes, as Chromium reads a special URL.

    Without this, ``file:///task/..\\..\\etc/passwd`` would look like one file inside the task's
    directory, and ``http://evil.example\\@allowed.example/`` like a page of ``allowed.example``.
    """
    if urlsplit(url).scheme.lower() not in _SPECIAL_SCHEMES or "\\" not in url:
        return url
    end = min((index for index in (url.find("?"), url.find("#")) if index >= 0), default=len(url))
    return url[:end].replace("\\", "/") + url[end:]


def _file_path(url: str) -> str | None:
    """The normalised local path of a ``file:`` URL on this machine, or ``None`` for a remote one."""
    parts = urlsplit(url)
    if parts.netloc.lower() not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    if "\x00" in path or not path.startswith("/"):
        return None
    # "/pages/miniwob/../../etc/passwd" must not pass as lying under "/pages/miniwob/".
    normalised = posixpath.normpath(path)
    return normalised + "/" if path.endswith("/") and normalised != "/" else normalised


@dataclass(frozen=True)
class NavigationPolicy:
    """The places a task's agent may navigate to.

    Attributes:
        domains: Hosts (``"example.com"`` also admits its subdomains) or ``"host:port"``.
        directories: ``file:`` directory URLs (ending in ``/``) whose files and subdirectories are allowed,
            or ``miniwob:///`` for the portable MiniWoB++ pages.
        resource_directories: ``file:`` directory URLs a page may also load its resources and frames from
            (never a tab's own page): the parent of each of ``directories``, where local tasks keep what
            their pages share (MiniWoB++'s ``../core/`` and ``../common/``).
    """

    domains: tuple[str, ...] = ()
    directories: tuple[str, ...] = ()
    resource_directories: tuple[str, ...] = ()

    @classmethod
    def for_start_url(cls, start_url: str, allowed: Sequence[str] | None = None) -> NavigationPolicy:
        """The policy of a task that starts at ``start_url``.

        Args:
            start_url: The task's start page.
            allowed: Hosts, ``host:port``, ``file:`` directory URLs, or ``"file://"`` for the start page's
                own directory. ``None``: the start page's host, or its directory for a local page.
        """
        start = urlsplit(start_url)
        start_directory = ""
        if start.scheme == "file":
            path = _file_path(start_url) or "/"
            start_directory = "file://" + (path if path.endswith("/") else posixpath.dirname(path).rstrip("/") + "/")
        elif start.scheme == PORTABLE_SCHEME:  # a recorded page read without the miniwob package installed
            start_directory = f"{PORTABLE_SCHEME}:///"
        if allowed is None:
            allowed = ["file://"] if start_directory else ([start.netloc] if start.netloc else [])
        domains: list[str] = []
        directories: list[str] = []
        for entry in allowed:
            if entry.lower().rstrip("/") in ("file:", "file"):
                if start_directory:
                    directories.append(start_directory)
            elif entry.lower().startswith("file:"):
                path = _file_path(entry) or "/"
                directories.append("file://" + path.rstrip("/") + "/")
            else:
                domains.append(entry)
        local = [directory[len("file://") :] for directory in directories if directory.startswith("file://")]
        parents = ["file://" + posixpath.dirname(path.rstrip("/")).rstrip("/") + "/" for path in local]
        return cls(tuple(domains), tuple(dict.fromkeys(directories)), tuple(dict.fromkeys(parents)))

    def allows(self, url: str) -> bool:
        """Whether ``url`` (absolute) may be navigated to."""
        return not self.refusal(url)

    def allows_resource(self, url: str) -> bool:
        """Whether a page may load ``url`` (absolute) as a resource or into a frame: anything :meth:`allows`, and
        the files under :attr:`resource_directories`."""
        if self.allows(url):
            return True
        try:
            url = _as_browser_parses(url)
            path = _file_path(url) if urlsplit(url).scheme.lower() == "file" else None
        except ValueError:
            return False
        if path is None or _has_control_characters(url):
            return False
        return any(path.startswith(directory[len("file://") :]) for directory in self.resource_directories)

    def refusal(self, url: str, base_url: str = "") -> str:
        """Why navigating to ``url`` is refused (``""`` if it is allowed), in the words both envs show.

        Args:
            url: Where the agent or the page wants to go; relative URLs are resolved against ``base_url``.
            base_url: The current page's URL.
        """
        if not isinstance(url, str) or not url.strip():
            return "navigation refused: the URL is empty"
        if _has_control_characters(url):
            return "navigation refused: the URL contains whitespace or control characters"
        absolute = absolute_url(url, base_url)
        try:
            absolute = _as_browser_parses(absolute)
            if self._allowed(absolute):
                return ""
        except ValueError:  # not a URL at all, e.g. "http://[::1"
            pass
        return (
            f"navigation to {absolute[:MAX_SHOWN_URL_LENGTH]} refused: outside the allowed domains "
            f"({', '.join(self.domains + self.directories) or 'none'})"
        )

    def _allowed(self, url: str) -> bool:
        scheme = urlsplit(url).scheme.lower()
        if url.lower() in _BLANK_PAGES:
            return True
        if scheme in ("http", "https"):
            return url_in_domains(url, self.domains)
        if scheme == PORTABLE_SCHEME:
            # Resolved at load time to a file under MiniWoB++'s page directory: it must not climb out of it.
            inside = posixpath.normpath("/pages" + unquote(urlsplit(url).path)).startswith("/pages/")
            return f"{PORTABLE_SCHEME}:///" in self.directories and inside
        if scheme == "file":
            path = _file_path(url)
            if path is None:
                return False
            return any(path.startswith(directory[len("file://") :]) for directory in self.directories)
        return False  # data:, blob:, javascript:, chrome:, about:..., and every other scheme


__all__ = [
    "MAX_SHOWN_URL_LENGTH",
    "PORTABLE_SCHEME",
    "NavigationPolicy",
    "absolute_url",
    "proxy_bypass_rules",
    "url_in_domains",
]
