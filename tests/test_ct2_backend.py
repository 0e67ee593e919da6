"""Tests of the CTranslate2 engine backend on the tiny embedded model (a conversion takes seconds).

Log-probabilities are checked against the transformers reference scoring the engine's own tokens.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dynaweb_env.llm import (
    GenerationBackend,
    SamplingParams,
    ct2_convert,
    default_engine,
    make_backend,
    parse_backend_spec,
)
from dynaweb_env.llm import ct2_backend as engine_module
from dynaweb_env.llm.ct2_backend import first_turn_length, plan_groups

pytest.importorskip("ctranslate2", reason="needs the engine extra: pip install 'dynaweb[engine]'")

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Tell me a long story about a cat and a dog who meet in a park."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}],
]


@pytest.fixture(scope="module")
def engine():
    """tiny-random converted with float32 weights, so that its numbers match the reference closely."""
    return make_backend("ct2:tiny-random", quantization="float32")


@pytest.fixture(scope="module")
def reference():
    return make_backend("tiny-random")


def _reference_logprobs(reference, prompt_ids, completion_ids, temperature: float = 1.0) -> list[float]:
    """log_softmax(logits / T) of ``completion_ids`` after ``prompt_ids`` under the transformers model."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = reference.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logps = torch.log_softmax(logits / temperature, dim=-1)
    return logps.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1).tolist()


def test_engine_is_a_generation_backend_with_aligned_outputs(engine, reference):
    params = SamplingParams(max_new_tokens=12, temperature=0)
    generations = engine.generate(CONVERSATIONS, params)
    assert isinstance(engine, GenerationBackend)
    assert len(generations) == len(CONVERSATIONS)
    for conversation, generation in zip(CONVERSATIONS, generations, strict=True):
        assert generation.prompt_ids == reference.chat_prompt_ids(conversation)
        assert 1 <= len(generation.completion_ids) == len(generation.logprobs) <= 12
        assert generation.finish_reason in ("stop", "length")
        assert generation.text == reference.tokenizer.decode(generation.completion_ids, skip_special_tokens=True)


def test_greedy_tokens_and_logprobs_match_the_transformers_reference(engine, reference):
    params = SamplingParams(max_new_tokens=16, temperature=0)
    ours = engine.generate(CONVERSATIONS, params)
    theirs = reference.generate(CONVERSATIONS, params)
    for mine, ref in zip(ours, theirs, strict=True):
        assert mine.completion_ids == ref.completion_ids  # float32 weights: the same argmax path
        expected = _reference_logprobs(reference, mine.prompt_ids, mine.completion_ids)
        assert mine.logprobs == pytest.approx(expected, abs=2e-3)


def test_sampling_logprobs_at_the_converted_temperature_match_the_reference(reference, tmp_path):
    # The trainer converts its policy with the rollout temperature folded into the output layer.
    hot = make_backend("ct2:tiny-random", quantization="float32", cache=False)
    from dynaweb_env.llm.ct2_convert import load_merged_model

    model, tokenizer = load_merged_model("tiny-random")
    directory = ct2_convert.convert_model(
        model, tokenizer, tmp_path / "t07", quantization="float32", logits_temperature=0.7
    )
    hot.reload(directory)
    params = SamplingParams(max_new_tokens=10, temperature=0.7, top_p=0.9, seed=5)
    for generation in hot.generate(CONVERSATIONS, params):
        assert len(generation.logprobs) == len(generation.completion_ids)
        expected = _reference_logprobs(reference, generation.prompt_ids, generation.completion_ids, 0.7)
        assert generation.logprobs == pytest.approx(expected, abs=2e-3)
    # At another temperature the engine cannot give the sampling log-probs, and gives none.
    other = hot.generate(CONVERSATIONS[:1], SamplingParams(max_new_tokens=4, temperature=1.0, seed=1))
    assert other[0].logprobs == [] and other[0].completion_ids


def test_seeded_sampling_is_reproducible(engine):
    params = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=1.0, seed=11)
    first = engine.generate(CONVERSATIONS, params)
    engine.generate(CONVERSATIONS, SamplingParams(max_new_tokens=8, temperature=1.0))  # moves the running state
    again = engine.generate(CONVERSATIONS, params)
    other = engine.generate(CONVERSATIONS, SamplingParams(max_new_tokens=16, temperature=1.0, top_p=1.0, seed=12))
    assert [g.completion_ids for g in first] == [g.completion_ids for g in again]
    assert [g.completion_ids for g in first] != [g.completion_ids for g in other]
    # A GRPO group: identical prompts in one call still get different samples.
    group = engine.generate([CONVERSATIONS[1]] * 4, params)
    assert len({tuple(g.completion_ids) for g in group}) > 1


def test_seeded_calls_sample_on_a_spare_engine_loaded_in_the_background(monkeypatch):
    import threading

    backend = make_backend("ct2:tiny-random", quantization="float32", cache=False)
    loads = []
    load = backend._new_generator
    monkeypatch.setattr(
        backend, "_new_generator", lambda *args: loads.append(threading.current_thread().name) or load(*args)
    )
    prefix = list(range(100, 140))  # a shared prefix: the spare computes its state before the next call
    prompts = [prefix + [7, 8], prefix + [9, 10, 11]]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0, seed=4)
    first = backend.generate_from_ids(prompts, params)
    assert loads[0] == "MainThread"  # the first seeded call loads its engine itself
    for _ in range(2):
        again = backend.generate_from_ids(prompts, params)
        assert [g.completion_ids for g in again] == [g.completion_ids for g in first]
    assert loads[1:] and all(name.startswith("ct2-spare") for name in loads[1:])  # later ones: in the background
    assert backend._spare.result().cached == [tuple(prefix)]
    backend.reload()  # the weight sync: a spare holding the old weights is replaced
    assert backend.generate_from_ids(prompts, params)[0].completion_ids == first[0].completion_ids


def test_stop_strings_end_a_sequence_in_the_engine(engine):
    # Seeded sampling: reproducible, and varied text to cut (the tiny model's greedy output is newlines).
    long = SamplingParams(max_new_tokens=24, temperature=1.0, top_p=1.0, seed=3)
    [full] = engine.generate(CONVERSATIONS[1:2], long)
    assert len(full.completion_ids) > 8, "needs a long output to cut"
    stop = engine.tokenizer.decode(full.completion_ids[5:7], skip_special_tokens=True)
    assert stop.strip() and stop in full.text
    [cut] = engine.generate(CONVERSATIONS[1:2], dataclasses.replace(long, stop=(stop,)))
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(stop) + len(stop)]
    assert len(cut.completion_ids) < len(full.completion_ids)
    assert cut.completion_ids == full.completion_ids[: len(cut.completion_ids)]


def test_stop_at_repeated_line_uses_the_shared_rule(engine, monkeypatch):
    # The tiny random model writes no newlines, so the rule is checked through the shared stop_text
    # helper that the engine's callback calls: a rule that fires ends the sequence at that token.
    calls = []

    def fake_stop_text(tokenizer, completion, params):
        calls.append(len(completion))
        return "cut" if params.stop_at_repeated_line and len(completion) == 3 else None

    monkeypatch.setattr(engine_module, "stop_text", fake_stop_text)
    params = SamplingParams(max_new_tokens=12, temperature=0, stop_at_repeated_line=True)
    [generation] = engine.generate(CONVERSATIONS[1:2], params)
    assert generation.text == "cut" and generation.finish_reason == "stop"
    assert len(generation.completion_ids) == 3 and calls == [1, 2, 3]


def test_bad_prompts_raise_value_error(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.generate_from_ids([[]], SamplingParams(max_new_tokens=2))
    with pytest.raises(ValueError, match="outside"):
        engine.generate_from_ids([[10**9]], SamplingParams(max_new_tokens=2))
    assert engine.generate_from_ids([], SamplingParams(max_new_tokens=2)) == []


def test_shared_prefix_becomes_a_kept_static_prompt(engine):
    prefix = list(range(100, 140))
    prompts = [prefix + [7, 8], prefix + [9, 10], prefix + [11, 12]]  # one engine call (equal lengths)
    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    first = engine.generate_from_ids(prompts, greedy)
    assert tuple(prefix) not in engine._cached_prompts  # seen once, by one engine call: computed, not kept
    second = engine.generate_from_ids(prompts, greedy)
    assert tuple(prefix) in engine._cached_prompts  # seen twice: kept
    third = engine.generate_from_ids(prompts, greedy)
    alone = [engine.generate_from_ids([ids], greedy)[0] for ids in prompts]
    for a, b, c, d in zip(first, second, third, alone, strict=True):
        assert a.completion_ids == b.completion_ids == c.completion_ids == d.completion_ids


def test_one_prompt_at_a_time_keeps_its_first_chat_turn(reference):
    # A process stepping one env calls with one prompt at a time; the system turn, the same in every call, is
    # prefilled once and kept from its second call on, and the greedy tokens stay the reference's.
    engine = make_backend("ct2:tiny-random", quantization="float32", cache=False)
    system = {"role": "system", "content": "You predict the next page of a web site. " * 4}
    pages = [[system, {"role": "user", "content": f"Page {n}: a button 'Ok' and a link 'Next'."}] for n in range(3)]
    ids = [engine.chat_prompt_ids(page) for page in pages]
    turn = first_turn_length(ids[0])
    assert turn >= 16 and ids[1][:turn] == ids[0][:turn] and ids[0][turn] == ids[0][0]  # up to <|im_start|>user
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    ours = [engine.generate([page], greedy)[0].completion_ids for page in pages]
    assert tuple(ids[0][:turn]) in engine._cached_prompts
    assert ours == [generation.completion_ids for generation in reference.generate(pages, greedy)]
    assert first_turn_length([5, 6, 7]) == 0  # no turn marker comes back: no prefix


def test_ragged_prompts_down_to_one_token_generate_as_alone(engine):
    # The engine would report the prompt tail of longer rows as generated tokens when the shortest
    # prompt leaves nothing to prefill; the backend keeps that from happening.
    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    prefix = list(range(100, 140))
    for prompts in ([[5], [6, 7, 8], [9, 10]], [prefix + [7, 8], prefix + [9], prefix + [10, 11, 12]]):
        together = engine.generate_from_ids(prompts, greedy)
        alone = [engine.generate_from_ids([ids], greedy)[0] for ids in prompts]
        assert [g.completion_ids for g in together] == [g.completion_ids for g in alone]


def test_two_workers_run_split_calls_side_by_side_with_the_same_outputs(engine):
    side_by_side = make_backend("ct2:tiny-random", quantization="float32", workers=2, cache=False)
    prompts = [list(range(100, 104)), list(range(100, 400)), list(range(200, 206)), list(range(150, 420))]
    assert len(plan_groups([len(ids) for ids in prompts], 8, 16)) > 1
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    ours = side_by_side.generate_from_ids(prompts, greedy)
    assert [g.completion_ids for g in ours] == [g.completion_ids for g in engine.generate_from_ids(prompts, greedy)]
    with pytest.raises(ValueError, match="workers"):
        make_backend("ct2:tiny-random", quantization="float32", workers=0, cache=False)


def test_engine_threads_follow_the_affinity_and_omp_num_threads(monkeypatch):
    from dynaweb_env.llm.base import default_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cpus = default_threads()
    assert cpus >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1 and make_backend("ct2:tiny-random", quantization="float32", cache=False).threads == 1
    for ignored in ("0", "many", "", str(cpus + 8)):  # unset, unreadable or above the CPUs: the CPUs
        monkeypatch.setenv("OMP_NUM_THREADS", ignored)
        assert default_threads() == cpus


def test_plan_groups_splits_far_apart_lengths():
    assert plan_groups([500, 502, 501], 64, 16) == [[0, 2, 1]]
    groups = plan_groups([100, 1500, 105, 1490], 64, 16)
    assert sorted(map(sorted, groups)) == [[0, 2], [1, 3]]
    groups = plan_groups([300] * 10, 64, 4)
    assert sorted(i for group in groups for i in group) == list(range(10))
    assert max(map(len, groups)) <= 4


def test_engine_copies_are_float32_unless_asked_and_keep_their_type(tmp_path):
    # int8 matrix products change the world models' pages (strict F1 0.86 -> 0.73 on held-out transitions).
    assert ct2_convert.DEFAULT_QUANTIZATION == "float32"
    # A converted directory computes in the type it was converted to, whatever its name says.
    path = ct2_convert.prepare_engine_model("tiny-random", "int8")
    moved = tmp_path / "converted"
    moved.symlink_to(path, target_is_directory=True)
    assert make_backend(f"ct2:{moved}", cache=False).compute_type == "int8"
    assert make_backend(f"ct2:{moved}", quantization="float32", cache=False).compute_type == "float32"
    assert make_backend("ct2:tiny-random", cache=False).compute_type == "float32"


def test_float32_engine_gives_the_reference_greedy_tokens_in_any_batch(engine, reference):
    # What makes it the world models' engine: the batch a prompt is decoded in does not change its tokens.
    params = SamplingParams(max_new_tokens=24, temperature=0.0)
    alone = [engine.generate([conversation], params)[0].completion_ids for conversation in CONVERSATIONS]
    together = [generation.completion_ids for generation in engine.generate(CONVERSATIONS * 2, params)]
    expected = [generation.completion_ids for generation in reference.generate(CONVERSATIONS, params)]
    assert alone == expected
    assert together == expected * 2


def test_shipped_names_default_to_the_engine_and_fall_back(monkeypatch):
    monkeypatch.delenv("DYNAWEB_ENGINE", raising=False)
    assert parse_backend_spec("smollm2-135m-judge")["backend"] == "auto"  # the engine per call shape
    assert parse_backend_spec("transformers:smollm2-135m-judge")["backend"] == "transformers"
    assert parse_backend_spec("smollm2-135m-wm")["backend"] == "auto"
    assert parse_backend_spec("smollm2-135m-wm-patch")["backend"] == "auto"
    assert parse_backend_spec("ct2:tiny-random") == {"backend": "ct2", "model": "tiny-random"}
    assert parse_backend_spec("tiny-random")["backend"] == "transformers"  # not frozen: stays the reference
    monkeypatch.setattr(ct2_convert, "engine_available", lambda: False)
    assert default_engine() == "transformers"
    assert parse_backend_spec("smollm2-135m-judge")["backend"] == "transformers"
    monkeypatch.setenv("DYNAWEB_ENGINE", "transformers")
    assert parse_backend_spec("smollm2-135m-judge")["backend"] == "transformers"
    monkeypatch.setenv("DYNAWEB_ENGINE", "ct2")
    assert parse_backend_spec("smollm2-135m-judge")["backend"] == "ct2"
    monkeypatch.setenv("DYNAWEB_ENGINE", "vulkan")
    with pytest.raises(ValueError, match="DYNAWEB_ENGINE"):
        parse_backend_spec("smollm2-135m-wm")
    with pytest.raises(ValueError, match="ct2"):
        parse_backend_spec("ct2:")


def test_conversion_cache_keys_follow_the_model_files(tmp_path):
    import shutil

    from dynaweb_env.llm.ct2_convert import engine_model_dir
    from dynaweb_env.models import SHIPPED_ADAPTERS, cache_dir

    assert engine_model_dir("tiny-random") == cache_dir() / "ct2" / "tiny-random-float32"
    assert engine_model_dir("tiny-random", "int8").name == "tiny-random-int8"
    shipped = engine_model_dir("smollm2-135m-wm").name
    assert shipped.startswith("smollm2-135m-wm-") and shipped.endswith("-float32")
    # A copy of the shipped adapter elsewhere is the same content: the same fingerprint.
    copy = tmp_path / "wm"
    shutil.copytree(SHIPPED_ADAPTERS["smollm2-135m-wm"].path, copy)
    assert engine_model_dir(copy).name.split("-")[-2] == shipped.split("-")[-2]
    (copy / "adapter_config.json").write_text((copy / "adapter_config.json").read_text() + " ")
    assert engine_model_dir(copy).name.split("-")[-2] != shipped.split("-")[-2]  # retrained: converted again
    with pytest.raises(ValueError, match="local"):
        engine_model_dir("org/hub-model")


def test_missing_engine_gives_a_clear_import_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import now fails as if not installed
    with pytest.raises(ImportError, match=r"dynaweb\[engine\]"):
        make_backend("ct2:tiny-random", cache=False)


def test_logprobs_are_finite_log_probabilities(engine):
    for generation in engine.generate(CONVERSATIONS, SamplingParams(max_new_tokens=6, temperature=0)):
        assert all(math.isfinite(value) and value <= 0 for value in generation.logprobs)
