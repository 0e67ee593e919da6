"""OpenVINO GenAI vs the transformers backend on the world model's prompts (issue #16's third engine).

A probe, not a backend: it measures whether OpenVINO, Intel's maintained CPU engine, would reach #16's goal
(3x the ``transformers`` backend's tokens/s on batched world-model generation) with the outputs kept. Both
engines run the shipped world model (``smollm2-135m-wm-patch``, merged, float32) on the 8 dream start states'
world-model prompts of ``engine_throughput.py``, greedy, 96 new tokens, interleaved: all 8 at once, then one at a
time. Each greedy output is compared with the ``transformers`` one, text for text.

OpenVINO's exporter (``optimum-intel``) pins ``transformers<5.6``, so it lives in a venv of its own that reuses
this environment's torch and package (run from the repository root)::

    python -m venv --system-site-packages /tmp/ov
    /tmp/ov/bin/pip install --no-deps openvino==2026.4.1 openvino-genai==2026.4.1.0 openvino-tokenizers==2026.4.1.0 \
        openvino-telemetry optimum-intel==2.2.0 optimum==2.3.0 nncf==3.4.0 pydot transformers==5.5.4 \
        huggingface_hub==1.33.0 tokenizers==0.22.2
    python -c "from dynaweb_env.serving import export_merged_model as e; e('smollm2-135m-wm-patch', '/tmp/wm-merged')"
    /tmp/ov/bin/optimum-cli export openvino -m /tmp/wm-merged --task text-generation-with-past \
        --weight-format fp32 /tmp/wm-ov-fp32
    /tmp/ov/bin/python benchmarks/openvino_probe.py /tmp/wm-ov-fp32

Stop other jobs first (the figures are tokens per second of this machine). OpenVINO GenAI's default attention
backend (paged attention, for continuous batching) died of a floating-point exception on the 2-core Xeon VM of
2026-11-26, as did any pipeline given ``INFERENCE_NUM_THREADS`` or run under ``taskset``; the probe uses the SDPA
backend, which runs. Results go to ``benchmarks/results/openvino_probe.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from engine_throughput import side_by_side, world_model_prompts
from env_throughput import dream_start_states

from dynaweb_env.llm import make_backend
from dynaweb_env.llm.base import Generation, SamplingParams

RESULTS = Path(__file__).parent / "results" / "openvino_probe.json"


class OpenVINOBackend:
    """Greedy generation with an OpenVINO GenAI pipeline, in the backend protocol's shape (texts, token ids)."""

    def __init__(self, model_dir: str, tokenizer):
        import openvino_genai

        self._genai = openvino_genai
        self.pipeline = openvino_genai.LLMPipeline(model_dir, "CPU", ATTENTION_BACKEND="SDPA")
        self.tokenizer = tokenizer

    def generate(self, conversations, params: SamplingParams) -> list[Generation]:
        template = self.tokenizer.apply_chat_template
        texts = [template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
        config = self._genai.GenerationConfig(max_new_tokens=params.max_new_tokens, do_sample=False)
        config.apply_chat_template = False  # the texts are templated already, as the transformers backend does it
        outputs = self.pipeline.generate(texts, config).texts
        return [
            Generation(text=text, completion_ids=self.tokenizer(text, add_special_tokens=False)["input_ids"])
            for text in outputs
        ]


def compare(backends: dict, prompts: list, params: SamplingParams, batched: bool) -> dict:
    """Tokens/s side by side, then each engine's greedy outputs, text for text."""
    result = side_by_side(backends, prompts, params, batched=batched)
    outputs = {
        name: [g.text for g in backend.generate(prompts, params)]
        if batched
        else [backend.generate([p], params)[0].text for p in prompts]
        for name, backend in backends.items()
    }
    pairs = list(zip(outputs["transformers"], outputs["openvino"], strict=True))
    result["identical_outputs"] = sum(a.strip() == b.strip() for a, b in pairs)
    result["differing_outputs"] = [{"transformers": a, "openvino": b} for a, b in pairs if a.strip() != b.strip()]
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="the OpenVINO export of the merged world model")
    parser.add_argument("--world-model", default="smollm2-135m-wm-patch")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    import openvino_genai
    import transformers

    states, actions = dream_start_states(args.prompts)
    prompts = world_model_prompts(states, actions, args.world_model)
    reference = make_backend(f"transformers:{args.world_model}")
    backends = {"transformers": reference, "openvino": OpenVINOBackend(args.model_dir, reference.tokenizer)}
    greedy = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    results = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "cpu": platform.processor() or platform.machine(),
        "versions": {"openvino_genai": openvino_genai.__version__, "transformers": transformers.__version__},
        "load_average_at_start": os.getloadavg()[0],
        "world_model_batched": compare(backends, prompts, greedy, batched=True),
        "world_model_single": compare(backends, prompts, greedy, batched=False),
        "load_average_at_end": os.getloadavg()[0],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    for section in ("world_model_batched", "world_model_single"):
        r = results[section]
        print(f"{section}: transformers {r['transformers']['tokens_per_second']} tok/s, openvino "
              f"{r['openvino']['tokens_per_second']} tok/s ({r['tokens_per_second_ratio']}x), "
              f"{r['identical_outputs']}/{r['prompts']} outputs identical")  # fmt: skip
    return results


if __name__ == "__main__":
    main()
