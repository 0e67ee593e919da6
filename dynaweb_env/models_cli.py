"""The command line of :mod:`dynaweb_env.models`: ``python -m dynaweb_env.models prepare|list|engine|ship``.

Usage is in :mod:`dynaweb_env.models`' docstring.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from .llm.ct2_convert import DEFAULT_QUANTIZATION  # imports no engine: that waits for a conversion
from .models import (
    ADAPTER_CONFIG_FILE,
    EMBEDDED_MODELS,
    SHIPPED_ADAPTERS,
    WORLD_MODEL_INFO_FILE,
    is_prepared,
    model_dir,
    prepare_model,
)
from .models import __doc__ as MODELS_DOC


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``prepare [names...]``, ``engine [refs...]``, ``list`` or ``ship SRC NAME``."""
    parser = argparse.ArgumentParser(prog="python -m dynaweb_env.models", description=MODELS_DOC.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="build named models into the cache (default: all)")
    prepare.add_argument("names", nargs="*", metavar="NAME", help=f"one of: {', '.join(EMBEDDED_MODELS)}")
    prepare.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    engine = sub.add_parser("engine", help="convert models for the CTranslate2 engine (default: the shipped adapters)")
    engine.add_argument("references", nargs="*", metavar="REF", help="embedded or shipped names, or directories")
    engine.add_argument(
        "--quantization", default=DEFAULT_QUANTIZATION, help=f"weight type (default: {DEFAULT_QUANTIZATION})"
    )
    engine.add_argument("--force", action="store_true", help="convert again even if already converted")
    sub.add_parser("list", help="list named models and whether they are prepared")
    ship = sub.add_parser("ship", help="copy a trained adapter directory into the package as a shipped adapter")
    ship.add_argument("source", help="adapter directory (e.g. the output_dir of dynaweb-train-wm)")
    ship.add_argument("name", choices=list(SHIPPED_ADAPTERS))
    ship.add_argument("--max-rank", type=int, help="cut a higher-rank adapter to this rank (SVD; default 8, 0: no cut)")
    args = parser.parse_args(argv)
    if args.command == "ship":
        from .ship import SHIPPED_MAX_RANK, ship_adapter

        max_rank = SHIPPED_MAX_RANK if args.max_rank is None else args.max_rank or None
        path = ship_adapter(args.source, args.name, max_rank)
        cut = json.loads((path / WORLD_MODEL_INFO_FILE).read_text()).get("lora_rank_cut")
        print(f"{args.name}: {path}" + (f" (LoRA rank cut: {cut})" if cut else ""))
        return 0
    if args.command == "engine":
        from .llm.ct2_convert import prepare_engine_model

        for reference in args.references or list(SHIPPED_ADAPTERS):
            path = prepare_engine_model(reference, args.quantization, force=args.force, verbose=True)
            print(f"{reference}: {path}")
        return 0
    if args.command == "list":
        for name, model in EMBEDDED_MODELS.items():
            state = "prepared" if is_prepared(name) else "not prepared"
            print(f"{name:22s} {state:13s} {model_dir(name)}  ({model.description})")
        for name, adapter in SHIPPED_ADAPTERS.items():
            state = "shipped" if (adapter.path / ADAPTER_CONFIG_FILE).is_file() else "missing"
            print(f"{name:22s} {state:13s} {adapter.path}  ({adapter.description})")
        return 0
    unknown = [name for name in args.names if name not in EMBEDDED_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(EMBEDDED_MODELS)}")
    for name in args.names or list(EMBEDDED_MODELS):
        path = prepare_model(name, force=args.force, verbose=True)
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
