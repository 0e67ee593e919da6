"""Every reach into another library's private internals, one module per library.

DynaWeb patches or reads a few private names of BrowserGym and Playwright (:mod:`.browsergym`,
:mod:`.playwright`), CTranslate2 (:mod:`.ctranslate2`), TRL (:mod:`.trl`), transformers (:mod:`.transformers`)
and torch (:mod:`.torch`) where their public API has no way to do what it needs. Each reach is one function
there, and each first checks that the installed library is a version it was tested with: an untested version
raises :class:`UntestedVersionError` naming the library, the tested range and the installed version, instead
of failing somewhere deep inside the library (or, worse, silently doing something else).

Nothing outside this package names another library's private attributes; ``tests/test_compat.py`` checks
that over the package sources, and checks each function against the installed libraries.

Set ``DYNAWEB_ALLOW_UNTESTED=1`` to turn the error into a warning (to try a newer release).

:mod:`.library_warnings` lists the other libraries' warnings that a DynaWeb user cannot act on (a library's
deprecation that another library's defaults trigger), each silenced by one filter of its module, category and
message.
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings

#: Environment variable that turns :class:`UntestedVersionError` into a warning.
ALLOW_UNTESTED_ENV = "DYNAWEB_ALLOW_UNTESTED"

_checked: dict[tuple[str, str], str] = {}  # (distribution, tested range) -> installed version that passed


class UntestedVersionError(RuntimeError):
    """An installed library is outside the version range a patch of its internals was tested with."""


def require_version(distribution: str, tested: str, purpose: str) -> str:
    """Check that ``distribution`` is installed in the ``tested`` version range before touching its internals.

    Args:
        distribution: The library's distribution name on PyPI (``"trl"``, ``"browsergym-core"``).
        tested: The tested range as a PEP 440 specifier (``">=1.16,<1.17"``).
        purpose: What DynaWeb does with the library's internals, for the error message.

    Returns:
        The installed version.

    Raises:
        UntestedVersionError: If the library is missing or its version is outside ``tested`` (a warning
            instead when ``DYNAWEB_ALLOW_UNTESTED=1``).
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if (distribution, tested) in _checked:
        return _checked[distribution, tested]
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise UntestedVersionError(
            f"{distribution} is not installed; DynaWeb needs {distribution}{tested} ({purpose})"
        ) from None
    if Version(installed) not in SpecifierSet(tested):
        message = (
            f"{distribution} {installed} is installed, but DynaWeb {purpose} relies on {distribution}'s private "
            f"internals and was tested with {distribution}{tested} only. Install a tested version "
            f"(pip install '{distribution}{tested}'), or set {ALLOW_UNTESTED_ENV}=1 to try this one anyway."
        )
        if os.environ.get(ALLOW_UNTESTED_ENV, "") not in ("1", "true", "yes"):
            raise UntestedVersionError(message)
        warnings.warn(message, stacklevel=3)
    _checked[distribution, tested] = installed
    return installed


__all__ = ["ALLOW_UNTESTED_ENV", "UntestedVersionError", "require_version"]
