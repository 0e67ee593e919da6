"""A world model or judge behind an OpenAI-compatible server: export it, serve it, name it in a spec.

A trained world model or judge is a LoRA adapter (shipped ones: ``smollm2-135m-wm``,
``smollm2-135m-judge``, ...). A server wants one plain model directory, so :func:`export_merged_model`
merges the adapter into its base and writes a ``from_pretrained`` directory, with the facts of how the
model was trained (:data:`~dynaweb_env.models.WORLD_MODEL_INFO_FILE`: prompt style, output mode) beside it.
Then any OpenAI-compatible server serves it, e.g. transformers' own (``pip install 'dynaweb[serve]'``)::

    python -m dynaweb_env.serving export smollm2-135m-wm models/wm       # prints the spec to use
    python -m dynaweb_env.serving export smollm2-135m-judge models/judge
    transformers serve --host 127.0.0.1 --port 8000 --device cpu          # serves both, loaded on demand
    URL='http://127.0.0.1:8000/v1?timeout=600&vllm_extensions=0'
    dynaweb-train --env dream --world-model "openai:models/wm@$URL&prompt_style=paper&output_mode=tree" \\
        --judge "openai:models/judge@$URL&prompt_style=paper"

(on a GPU: ``vllm serve models/wm``, without ``vllm_extensions=0``; the model name in the spec is the one
the server reports.) ``transformers serve`` refuses vLLM's extra request fields, hence ``vllm_extensions=0``.
A server does not tell how its model was trained, so the spec says it (:func:`served_model_spec`):
without ``prompt_style`` a served model is prompted in the paper's style and read in tree mode.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlencode

from .models import WORLD_MODEL_INFO_FILE, model_prompt_style, world_model_output_mode


def export_merged_model(reference: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> Path:
    """Write ``reference`` (adapter merged into its base, float32) as a plain model directory for a server.

    Args:
        reference: A shipped adapter or embedded name, or a local checkpoint or adapter directory.
        output_dir: The directory to write (created; files in it are overwritten).

    Returns:
        ``output_dir``, holding the weights, the tokenizer (chat template included) and
        :data:`~dynaweb_env.models.WORLD_MODEL_INFO_FILE` with the model's prompt style and output mode.
    """
    from .llm.ct2_convert import load_merged_model  # deferred: torch and transformers

    output_dir = Path(output_dir)
    model, tokenizer = load_merged_model(reference)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    info = {"prompt_style": model_prompt_style(reference), "source": os.fspath(reference)}
    if (mode := world_model_output_mode(reference)) is not None:
        info["output_mode"] = mode
    (output_dir / WORLD_MODEL_INFO_FILE).write_text(json.dumps(info) + "\n")
    return output_dir


def served_model_spec(
    model: str | os.PathLike[str],
    base_url: str,
    *,
    trained_as: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    vllm_extensions: bool = True,
) -> str:
    """The ``openai:`` backend spec of a model on a server, stating how it was trained.

    Args:
        model: The model name the server expects (for ``transformers serve``: the directory it loads).
        base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        trained_as: Where the training facts are recorded (a shipped adapter name, a checkpoint or an
            :func:`export_merged_model` directory); default: ``model`` itself.
        timeout: Seconds per request (see :mod:`dynaweb_env.llm.openai_backend`).
        retries: Retries after a refused connection or a 408/429/5xx answer.
        vllm_extensions: ``False`` for a server that refuses vLLM's extra request fields
            (``transformers serve`` answers them with HTTP 422).
    """
    facts = trained_as if trained_as is not None else model
    query: dict[str, object] = {"timeout": timeout, "retries": retries}
    query["vllm_extensions"] = None if vllm_extensions else 0
    query["prompt_style"] = model_prompt_style(facts)
    query["output_mode"] = world_model_output_mode(facts)
    text = urlencode({key: value for key, value in query.items() if value is not None}, safe="/:")
    return f"openai:{os.fspath(model)}@{base_url.rstrip('/')}?{text}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dynaweb_env.serving export REF DIR [--base-url URL]``: export, then print the spec."""
    parser = argparse.ArgumentParser(prog="python -m dynaweb_env.serving", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="merge a world model or judge into a plain directory a server loads")
    export.add_argument("reference", help="shipped adapter (smollm2-135m-wm, ...) or checkpoint directory")
    export.add_argument("output_dir")
    export.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="where the server will listen")
    args = parser.parse_args(argv)
    directory = export_merged_model(args.reference, args.output_dir).resolve()
    print(f"exported {args.reference} to {directory}")
    print(f"serve:  transformers serve --host 127.0.0.1 --port 8000   (or: vllm serve {directory})")
    print(f"spec:   {served_model_spec(directory, args.base_url, timeout=600, vllm_extensions=False)}")
    return 0


__all__ = ["export_merged_model", "served_model_spec"]

if __name__ == "__main__":
    sys.exit(main())
