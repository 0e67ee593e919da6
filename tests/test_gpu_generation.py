"""Tests of TransformersBackend's ``generate`` path (the GPU path, dynaweb_env.llm.hf_generate), forced on the CPU.

The path is chosen per device by ``decoding_plan``; here ``decoding="generate"`` forces it so that what a GPU would
run (transformers' ``model.generate``, our log-prob recorder and stop rules) is checked against the CPU loop and a
teacher-forced forward pass of the same tokens.
"""

from __future__ import annotations

import pytest
import torch

from dynaweb_env.llm import SamplingParams, make_backend
from dynaweb_env.llm.call_plan import COMPILE_SHAPES_ENV, compile_shapes
from dynaweb_env.llm.hf_generate import (
    RepeatedLineStop,
    SamplingLogprobs,
    bucket_rows,
    cache_length,
    finished_row,
    generation_config,
)
from dynaweb_env.llm.transformers_backend import TransformersBackend, decoding_plan

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Tell me a long story about a cat and a dog who meet in a park."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}],
]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny_loop() -> TransformersBackend:
    return make_backend("tiny-random")


@pytest.fixture(scope="module")
def smol_loop() -> TransformersBackend:
    return make_backend("smollm2-135m")


def _generate_path(backend: TransformersBackend, **kwargs) -> TransformersBackend:
    return TransformersBackend(backend.model, backend.tokenizer, decoding="generate", **kwargs)


def _teacher_forced_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)


def test_decoding_plan_is_one_rule_per_device():
    assert decoding_plan(torch.device("cpu")) == ("loop", False)
    assert decoding_plan(torch.device("cuda")) == ("generate", True)
    assert decoding_plan(torch.device("cuda"), compile=False) == ("generate", False)
    assert decoding_plan(torch.device("cpu"), "generate") == ("generate", False)
    assert decoding_plan(torch.device("cuda"), "loop") == ("loop", False)  # compile belongs to generate only
    with pytest.raises(ValueError, match="decoding must be one of"):
        decoding_plan(torch.device("cpu"), "fast")
    with pytest.raises(ValueError, match="decoding must be one of"):
        TransformersBackend("no-such-model-is-loaded", decoding="fast")


def test_cpu_default_keeps_the_loop(tiny_loop):
    assert (tiny_loop.decoding, tiny_loop.compile) == ("loop", False)


@pytest.mark.parametrize("compile", [False, True], ids=["dynamic-cache", "static-cache"])
def test_sampled_logprobs_equal_a_teacher_forced_forward(tiny_loop, compile):
    # compile=True on a CPU: a static cache and a batch padded to 4 rows (torch.compile itself only on CUDA).
    backend = _generate_path(tiny_loop, compile=compile)
    params = SamplingParams(max_new_tokens=6, temperature=0.7, top_p=0.9, seed=3)
    generations = backend.generate(CONVERSATIONS, params)
    assert [len(g.completion_ids) for g in generations] == [6, 6, 6]
    for generation in generations:
        expected = _teacher_forced_logprobs(backend.model, generation.prompt_ids, generation.completion_ids, 0.7)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)
        assert generation.text == backend.tokenizer.decode(generation.completion_ids, skip_special_tokens=True)


def test_peft_wrapped_model_generates_with_exact_logprobs(tiny_loop):
    peft = pytest.importorskip("peft")
    import copy

    model = peft.get_peft_model(copy.deepcopy(tiny_loop.model), peft.LoraConfig(r=4, target_modules=["q_proj"]))
    backend = TransformersBackend(model, tiny_loop.tokenizer, decoding="generate")
    [generation] = backend.generate(CONVERSATIONS[:1], SamplingParams(max_new_tokens=4, temperature=1.0, seed=0))
    expected = _teacher_forced_logprobs(model, generation.prompt_ids, generation.completion_ids, 1.0)
    assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


def test_seeds_reproduce_and_leave_torch_rng_alone(tiny_loop):
    backend = _generate_path(tiny_loop)
    params = SamplingParams(max_new_tokens=5, temperature=1.0, top_p=1.0, seed=7)
    state = torch.get_rng_state()
    first = backend.generate(CONVERSATIONS, params)
    assert torch.equal(torch.get_rng_state(), state)
    assert [g.completion_ids for g in backend.generate(CONVERSATIONS, params)] == [g.completion_ids for g in first]
    other = backend.generate(CONVERSATIONS, SamplingParams(max_new_tokens=5, temperature=1.0, top_p=1.0, seed=8))
    assert [g.completion_ids for g in other] != [g.completion_ids for g in first]
    group = backend.generate([CONVERSATIONS[0]] * 4, params)
    assert len({tuple(g.completion_ids) for g in group}) > 1


def test_smollm2_greedy_matches_the_loop(smol_loop):
    backend = _generate_path(smol_loop)
    params = SamplingParams(max_new_tokens=6, temperature=0)
    pairs = zip(smol_loop.generate(CONVERSATIONS, params), backend.generate(CONVERSATIONS, params), strict=True)
    for loop, generated in pairs:
        assert (generated.completion_ids, generated.text) == (loop.completion_ids, loop.text)
        assert generated.finish_reason == loop.finish_reason
        assert max(abs(a - b) for a, b in zip(generated.logprobs, loop.logprobs, strict=True)) < 1e-4


def _assert_same_as_loop(loop_backend, backend, conversations, params):
    pairs = zip(loop_backend.generate(conversations, params), backend.generate(conversations, params), strict=True)
    for loop, generated in pairs:
        assert (generated.completion_ids, generated.text, generated.finish_reason) == (
            loop.completion_ids,
            loop.text,
            loop.finish_reason,
        )
        assert len(generated.logprobs) == len(generated.completion_ids)


DAYS = [{"role": "user", "content": "List the days of the week, then list them again."}]
FRUITS = [{"role": "user", "content": "Write a list of 3 fruits, one per line."}]


def test_smollm2_stop_strings_match_the_loop(smol_loop):
    params = SamplingParams(max_new_tokens=40, temperature=0, stop=("\n",))
    _assert_same_as_loop(smol_loop, _generate_path(smol_loop), [DAYS, FRUITS], params)


@pytest.mark.slow
def test_smollm2_repeated_line_matches_the_loop(smol_loop):
    backend = _generate_path(smol_loop)
    params = SamplingParams(max_new_tokens=60, temperature=0, stop_at_repeated_line=True)
    _assert_same_as_loop(smol_loop, backend, [DAYS, FRUITS], params)
    [stopped] = backend.generate([DAYS], params)  # greedy SmolLM2 loops on the days without the rule
    assert stopped.finish_reason == "stop" and len(stopped.completion_ids) < params.max_new_tokens


def test_repeated_line_stop_checks_in_bulk(tiny_loop):
    tokenizer = tiny_loop.tokenizer
    prompt = [1, 2]
    rows = [prompt + tokenizer(text, add_special_tokens=False)["input_ids"] for text in ("a\nb\na\n", "a\nb\nc\n")]
    width = max(map(len, rows))
    input_ids = torch.tensor([[0] * (width - len(ids)) + ids for ids in rows])
    stop = RepeatedLineStop(tokenizer, prompt_width=2, every=3)
    assert [stop(input_ids, None).tolist() for _ in range(3)] == [[False, False], [False, False], [True, False]]


def test_finished_row_cuts_at_eos_and_at_the_first_stop(tiny_loop):
    tokenizer = tiny_loop.tokenizer
    eos = next(iter(tiny_loop.eos_token_ids))
    words = tokenizer("a\nb\na\nc\n", add_special_tokens=False)["input_ids"]
    logprobs = [-0.5] * (len(words) + 3)
    padded = words + [eos, eos, eos]
    row = finished_row(tokenizer, [1], padded, logprobs, tiny_loop.eos_token_ids, SamplingParams())
    assert (row.completion_ids, row.finish_reason, row.text) == (words + [eos], "stop", "a\nb\na\nc\n")
    assert row.logprobs == logprobs[: len(words) + 1]
    repeated = finished_row(
        tokenizer, [1], padded, logprobs, tiny_loop.eos_token_ids, SamplingParams(stop_at_repeated_line=True)
    )
    assert repeated.text == "a\nb\n" and repeated.finish_reason == "stop"
    assert tokenizer.decode(repeated.completion_ids) == "a\nb\na\n"  # ends with the token completing the repeat
    running = finished_row(tokenizer, [1], words, logprobs, tiny_loop.eos_token_ids, SamplingParams(stop=("z",)))
    assert (running.finish_reason, len(running.completion_ids)) == ("length", len(words))


def test_sampling_logprobs_gathers_each_sampled_token():
    recorder = SamplingLogprobs(temperature=2.0)
    scores = [torch.tensor([[0.0, 1.0, 2.0]]), torch.tensor([[3.0, 0.0, 0.0]])]
    sequence = torch.tensor([[5, 2]])
    assert torch.equal(recorder(sequence[:, :1], scores[0]), scores[0])  # scores pass through unchanged
    recorder(sequence, scores[1])
    final = torch.tensor([[5, 2, 0]])
    got = recorder.finish(final, 2)
    expected = [torch.log_softmax(scores[0] / 2, -1)[0, 2], torch.log_softmax(scores[1] / 2, -1)[0, 0]]
    assert torch.allclose(got, torch.stack(expected)[None])


def test_bucket_rows():
    assert [bucket_rows(n, 16) for n in (1, 2, 3, 5, 8, 9, 16)] == [1, 2, 4, 8, 8, 16, 16]
    assert bucket_rows(5, 6) == 6 and bucket_rows(3, 3) == 3


def test_cache_length_leaves_few_compiled_lengths():
    # a rollout's prompts grow every turn: each length its own compiled graph would recompile every turn
    lengths = {cache_length(width + 64) for width in range(300, 3000, 37)}
    assert lengths == {1024, 2048, 4096}
    assert cache_length(1024) == 1024 and cache_length(1025) == 2048
    assert cache_length(5000, limit=8192) == 8192 and cache_length(9000, limit=8192) == 9000  # never too short
    assert cache_length(3000, limit=2048) == 3000


def test_compiled_config_sizes_the_static_cache():
    params = SamplingParams(max_new_tokens=8, temperature=0)
    config = generation_config(params, [0], 0, compile=True, cache_tokens=2048)
    assert (config.cache_implementation, config.max_cache_len, config.disable_compile) == ("static", 2048, False)
    eager = generation_config(params, [0], 0, compile=False, cache_tokens=2048)
    assert eager.cache_implementation is None and getattr(eager, "max_cache_len", None) is None


def test_compiled_shapes_choose_one_graph_or_one_per_shape(monkeypatch):
    params = SamplingParams(max_new_tokens=8, temperature=0)
    for shapes, dynamic in (("dynamic", True), ("static", False)):
        config = generation_config(params, [0], 0, compile=True, cache_tokens=1024, shapes=shapes)
        assert config.compile_config.dynamic is dynamic and config.compile_config.mode == "reduce-overhead"
    assert getattr(generation_config(params, [0], 0, compile=False), "compile_config", None) is None
    monkeypatch.setenv(COMPILE_SHAPES_ENV, "dynamic")
    assert compile_shapes() == "dynamic" and compile_shapes("static") == "static"
    monkeypatch.setenv(COMPILE_SHAPES_ENV, "sometimes")
    with pytest.raises(ValueError, match="DYNAWEB_COMPILE_SHAPES"):
        compile_shapes()
    monkeypatch.delenv(COMPILE_SHAPES_ENV)
    assert compile_shapes() == "dynamic"  # the measured default (call_plan.DEFAULT_COMPILE_SHAPES)
    with pytest.raises(ValueError, match="compile shapes"):
        TransformersBackend("tiny-random", compile_shapes="both")
