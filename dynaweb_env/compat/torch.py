"""What DynaWeb reaches inside torch: the compiler's recompile limit (``torch._dynamo.config``)."""

from __future__ import annotations

from . import require_version

#: The torch releases this reach was tested with (``recompile_limit`` is its name since 2.6; measured with 2.13).
TORCH_TESTED = ">=2.6,<3"
#: Compiled graphs kept per function before torch falls back to eager (torch's default is 8).
COMPILED_GRAPHS = 64


def allow_compiled_graphs(count: int = COMPILED_GRAPHS) -> None:
    """Let ``torch.compile`` keep at least ``count`` graphs of one function before it falls back to eager.

    transformers compiles each model's ``__call__`` for a static-cache ``generate``, one graph per model and
    (batch size, cache length). The world model, judge and policy of one process share that function's code, so
    torch's default of 8 graphs is reached within a training update, after which new shapes silently decode
    eagerly.

    Raises:
        UntestedVersionError: If the installed torch is outside :data:`TORCH_TESTED`.
    """
    require_version("torch", TORCH_TESTED, "raises the compiler's recompile limit (torch._dynamo.config)")
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, count)
