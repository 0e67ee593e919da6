"""Average LoRA adapters of one base model into one adapter (a "model soup" of fine-tuned runs).

Two runs fine-tuned from the same starting point often err on different inputs; the average of their weight
updates can keep the strengths of both (Wortsman et al., 2022, "Model soups"). Here it joins the shipped world
model with a run trained on from it, without training anything.

The average is exact: each layer's update becomes ``sum_i w_i * scaling_i * B_i @ A_i``, built by peft's
``add_weighted_adapter(combination_type="cat")``, which stacks the LoRA matrices (the rank is the sum of the
sources' ranks). ``python -m dynaweb_env.models ship`` then cuts it to the shipped rank by truncated SVD and
records how much of each update the cut kept.

Command line::

    dynaweb-average-adapters smollm2-135m-wm-patch runs/wm-focus-140 --output-dir runs/wm-soup
    dynaweb-average-adapters A B C --weights 0.5 0.25 0.25 --output-dir runs/soup
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.models import (
    ADAPTER_CONFIG_FILE,
    WORLD_MODEL_INFO_FILE,
    adapter_base,
    model_prompt_style,
    name_adapter_base,
    resolve_model,
    world_model_output_mode,
)
from dynaweb_env.ship import ADAPTER_WEIGHTS_FILE, AVERAGE_RECORD_FILE, TRAINING_RECORD_FILE


def _check_sources(references: Sequence[str], weights: Sequence[float]) -> tuple[list[Path], str, dict[str, Any]]:
    """The sources' directories, their common base and the prompt style and output mode they share."""
    if len(references) < 2:
        raise ValueError(f"average at least two adapters, got {len(references)}")
    if len(weights) != len(references):
        raise ValueError(f"{len(weights)} weights for {len(references)} adapters")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"weights must be finite and positive, got {list(weights)}")
    paths, bases, infos = [], set(), set()
    for reference in references:
        path = resolve_model(reference)
        base = adapter_base(path) if isinstance(path, Path) else None
        if base is None:
            raise ValueError(f"{reference} is not a LoRA adapter directory (no {ADAPTER_CONFIG_FILE})")
        paths.append(path)
        bases.add(base)
        # Averaged updates only make sense for models prompted alike and writing the same kind of output.
        infos.add((world_model_output_mode(str(path)), model_prompt_style(str(path))))
    if len(bases) > 1:
        raise ValueError(f"the adapters apply to different base models: {sorted(bases)}")
    if len(infos) > 1:
        raise ValueError(f"the adapters differ in (output_mode, prompt_style): {sorted(infos, key=str)}")
    output_mode, prompt_style = infos.pop()
    info = {"output_mode": output_mode, "prompt_style": prompt_style} if output_mode else {"prompt_style": prompt_style}
    return paths, bases.pop(), info


def average_adapters(
    adapters: Sequence[str | os.PathLike[str]],
    output_dir: str | os.PathLike[str],
    weights: Sequence[float] | None = None,
    command: str | None = None,
) -> Path:
    """Write the weighted average of LoRA adapters of one base model as one adapter.

    Args:
        adapters: Shipped adapter names or adapter directories (at least two), trained on the same base model
            and, for world models, for the same output mode and prompt style.
        output_dir: The directory to write: the adapter, its :data:`~dynaweb_env.models.WORLD_MODEL_INFO_FILE`
            and :data:`AVERAGE_RECORD_FILE` (the sources, their weights' sha256, their training records).
        weights: One positive weight per adapter (default: equal weights summing to 1). The averaged update of
            each layer is the weighted sum of the sources' updates.
        command: The command line recorded in the record (default: this process's ``sys.argv``).

    Returns:
        ``output_dir``.

    Raises:
        ValueError: If fewer than two adapters are given, a source is not an adapter, the sources differ in base
            model, output mode or prompt style, or the weights do not match them. Nothing is written then.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    references = [os.fspath(a) for a in adapters]
    weights = [1.0 / len(references)] * len(references) if weights is None else [float(w) for w in weights]
    paths, base, info = _check_sources(references, weights)
    names = [f"source{i}" for i in range(len(paths))]
    model = AutoModelForCausalLM.from_pretrained(resolve_model(base), dtype=torch.float32, trust_remote_code=False)
    model = PeftModel.from_pretrained(model, paths[0], adapter_name=names[0])
    for name, path in zip(names[1:], paths[1:], strict=True):
        model.load_adapter(path, adapter_name=name)
    model.add_weighted_adapter(names, weights, adapter_name="average", combination_type="cat")

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output_dir) as scratch:
        model.save_pretrained(scratch, selected_adapters=["average"])  # peft writes it into <scratch>/average
        for file_name in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE):
            shutil.move(Path(scratch) / "average" / file_name, output_dir / file_name)
    name_adapter_base(output_dir, base)  # an embedded name, not this machine's cache path
    (output_dir / WORLD_MODEL_INFO_FILE).write_text(json.dumps(info) + "\n")
    sources = []
    for reference, path, weight in zip(references, paths, weights, strict=True):
        training = path / TRAINING_RECORD_FILE
        sources.append(
            {
                "adapter": reference,
                "weight": weight,
                "weights_sha256": hashlib.sha256((path / ADAPTER_WEIGHTS_FILE).read_bytes()).hexdigest(),
                "training": json.loads(training.read_text()) if training.is_file() else None,
            }
        )
    record = {
        "combination": "weighted sum of the sources' LoRA updates (peft add_weighted_adapter, 'cat')",
        "base": base,
        "sources": sources,
        "command": command or shlex.join(sys.argv),
    }
    (output_dir / AVERAGE_RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return output_dir


def main(argv: Sequence[str] | None = None) -> Path:
    """Entry point of ``dynaweb-average-adapters``."""
    parser = argparse.ArgumentParser(
        prog="dynaweb-average-adapters", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("adapters", nargs="+", help="shipped adapter names or adapter directories")
    parser.add_argument("--output-dir", required=True, help="where the averaged adapter goes")
    parser.add_argument("--weights", type=float, nargs="+", help="one per adapter (default: equal)")
    args = parser.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        path = average_adapters(
            args.adapters, args.output_dir, args.weights, shlex.join(["dynaweb-average-adapters", *argv])
        )
    except ValueError as error:
        parser.error(str(error))
    print(f"averaged {len(args.adapters)} adapters into {path}")
    return path


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    main()


__all__ = ["AVERAGE_RECORD_FILE", "average_adapters", "main", "cli"]
