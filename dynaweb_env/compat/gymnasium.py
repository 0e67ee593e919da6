"""What DynaWeb uses of Gymnasium's vector-env internals."""

from __future__ import annotations

from typing import Any

from . import require_version

#: The Gymnasium releases this was tested with (the core dependency's range).
GYMNASIUM_TESTED = ">=1.4,<1.5"


def add_vector_info(vector_env: Any, infos: dict[str, Any], info: dict[str, Any], index: int) -> dict[str, Any]:
    """``infos`` with sub-env ``index``'s ``info`` added in Gymnasium's vector layout (values array + ``_key`` mask).

    The layout every Gymnasium vector env returns is built by ``VectorEnv``'s private ``_add_info``; a native
    vector env must return the same.

    Raises:
        UntestedVersionError: If the installed Gymnasium is outside :data:`GYMNASIUM_TESTED`.
    """
    require_version("gymnasium", GYMNASIUM_TESTED, "builds vector-env infos with VectorEnv._add_info")
    return vector_env._add_info(infos, info, index)


__all__ = ["GYMNASIUM_TESTED", "add_vector_info"]
