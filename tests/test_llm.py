"""Tests of the generation layer: TransformersBackend, OpenAIBackend against a real local server, make_backend."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from dynaweb_env.llm import (
    Generation,
    GenerationBackend,
    GenerationError,
    SamplingParams,
    clear_backend_cache,
    make_backend,
    parse_backend_spec,
)
from dynaweb_env.llm.base import cut_at_repeated_line, request_seeds
from dynaweb_env.llm.call_plan import MIN_SHARED_PREFIX
from dynaweb_env.llm.openai_backend import OpenAIBackend
from dynaweb_env.llm.transformers_backend import TransformersBackend, shared_prefix_length

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Tell me a long story about a cat and a dog who meet in a park."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}],
]
GREEDY = SamplingParams(max_new_tokens=6, temperature=0)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    # On this shared 2-core machine, two intra-op threads competing with other processes spin-wait
    # and run ~4x slower than one; the results do not depend on the thread count.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny() -> TransformersBackend:
    return make_backend("tiny-random")


@pytest.fixture(scope="module")
def smol() -> TransformersBackend:
    return make_backend("smollm2-135m")


def _check_aligned(generation: Generation, params: SamplingParams) -> None:
    assert len(generation.completion_ids) == len(generation.logprobs) >= 1
    assert len(generation.completion_ids) <= params.max_new_tokens
    assert all(math.isfinite(value) and value <= 0 for value in generation.logprobs)
    assert generation.finish_reason in ("stop", "length")


# --- TransformersBackend on the tiny random model ------------------------------------------------


def test_backend_satisfies_protocol(tiny):
    assert isinstance(tiny, GenerationBackend)
    assert tiny.model_name == "tiny-random"


def test_prompt_ids_are_the_chat_template(tiny):
    params = SamplingParams(max_new_tokens=3, seed=0)
    for conversation, generation in zip(CONVERSATIONS, tiny.generate(CONVERSATIONS, params), strict=True):
        _check_aligned(generation, params)
        assert generation.prompt_ids == tiny.chat_prompt_ids(conversation)
        rendered = tiny.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        assert tiny.tokenizer.decode(generation.prompt_ids) == rendered
        assert rendered.startswith("<|im_start|>") and rendered.endswith("<|im_start|>assistant\n")
        assert tiny.pad_token_id not in generation.prompt_ids[:1]  # no left padding leaked in
        assert generation.finish_reason == "length" and len(generation.completion_ids) == 3


def test_logprobs_match_a_full_forward_pass(tiny):
    # The KV-cached, left-padded decode must give the same log-probabilities as one plain forward
    # pass over prompt + completion, for the padded (short) prompt as well as the long one.
    params = SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, seed=3)
    for generation in tiny.generate(CONVERSATIONS, params):
        ids = torch.tensor([generation.prompt_ids + generation.completion_ids])
        with torch.no_grad():
            logits = tiny.model(ids).logits[0, len(generation.prompt_ids) - 1 : -1].float()
        expected = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, ids[0, len(generation.prompt_ids) :, None])
        assert torch.allclose(torch.tensor(generation.logprobs), expected.squeeze(-1), atol=1e-4)


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny):
    params = SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0, seed=7)
    first = tiny.generate(CONVERSATIONS, params)
    again = tiny.generate(CONVERSATIONS, params)
    assert [g.completion_ids for g in first] == [g.completion_ids for g in again]
    # Same model, batches of one: each sequence's sample depends only on (prompt, seed, position).
    one_at_a_time = TransformersBackend(tiny.model, tiny.tokenizer, max_batch_size=1)
    assert [g.completion_ids for g in one_at_a_time.generate(CONVERSATIONS, params)] == [
        g.completion_ids for g in first
    ]
    other_seed = tiny.generate(CONVERSATIONS, SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0, seed=8))
    assert [g.completion_ids for g in other_seed] != [g.completion_ids for g in first]


def test_identical_prompts_in_a_group_get_different_samples(tiny):
    group = tiny.generate([CONVERSATIONS[0]] * 4, SamplingParams(max_new_tokens=4, temperature=1.0, seed=0))
    assert len({tuple(g.completion_ids) for g in group}) > 1


def test_unseeded_sampling_follows_torch_manual_seed(tiny):
    params = SamplingParams(max_new_tokens=4, temperature=1.0)
    torch.manual_seed(123)
    first = tiny.generate(CONVERSATIONS[:2], params)
    torch.manual_seed(123)
    assert [g.completion_ids for g in tiny.generate(CONVERSATIONS[:2], params)] == [g.completion_ids for g in first]


def test_tiny_top_p_is_greedy(tiny):
    greedy = tiny.generate(CONVERSATIONS, GREEDY)
    nucleus_of_one = tiny.generate(CONVERSATIONS, SamplingParams(max_new_tokens=6, temperature=1.0, top_p=1e-6, seed=1))
    assert [g.completion_ids for g in nucleus_of_one] == [g.completion_ids for g in greedy]


def test_generate_from_ids_equals_generate(tiny):
    params = SamplingParams(max_new_tokens=4, temperature=0.7, seed=5)
    from_chat = tiny.generate(CONVERSATIONS, params)
    from_ids = tiny.generate_from_ids([tiny.chat_prompt_ids(c) for c in CONVERSATIONS], params)
    assert [(g.text, g.completion_ids) for g in from_ids] == [(g.text, g.completion_ids) for g in from_chat]
    assert tiny.generate([], params) == []


def test_training_mode_is_restored_and_inference_mode_is_harmless(tiny):
    tiny.model.train()
    try:
        tiny.generate(CONVERSATIONS[:1], GREEDY)
        assert tiny.model.training
        with torch.inference_mode():
            tiny.generate(CONVERSATIONS[:1], GREEDY)
    finally:
        tiny.model.eval()
    assert not tiny.model.training


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_peft_wrapped_model(tiny):
    peft = pytest.importorskip("peft")
    import copy

    wrapped = peft.get_peft_model(copy.deepcopy(tiny.model), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    backend = TransformersBackend(wrapped, tiny.tokenizer)
    params = SamplingParams(max_new_tokens=4, temperature=0.7, seed=2)
    # A fresh LoRA adapter is the identity (B = 0), so it must sample exactly what the base model does.
    base, lora = tiny.generate(CONVERSATIONS, params), backend.generate(CONVERSATIONS, params)
    assert [g.completion_ids for g in lora] == [g.completion_ids for g in base]
    assert torch.allclose(torch.tensor(lora[1].logprobs), torch.tensor(base[1].logprobs), atol=1e-5)


def test_decoding_passes_the_cache_by_the_name_transformers_expects(tiny):
    """No deprecation of transformers on a DynaWeb call: the KV cache goes by the keyword the model's forward names."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny.generate(CONVERSATIONS[:2], GREEDY)
    assert not [str(w.message) for w in caught if "past_key_values" in str(w.message)]


@pytest.mark.parametrize(
    "conversations",
    [
        ["not a conversation"],
        [[]],
        [[{"role": "user"}]],
        [[{"role": "user", "content": 3}]],
        [[{"content": "no role"}]],
    ],
)
def test_bad_conversations_raise_value_error(tiny, conversations):
    with pytest.raises(ValueError):
        tiny.generate(conversations, GREEDY)


def test_bad_prompt_ids_and_arguments_raise_value_error(tiny):
    with pytest.raises(ValueError, match="empty"):
        tiny.generate_from_ids([[1, 2], []], GREEDY)
    with pytest.raises(ValueError, match="outside"):
        tiny.generate_from_ids([[1, 10**9]], GREEDY)
    with pytest.raises(ValueError, match="tokenizer"):
        TransformersBackend(tiny.model)
    with pytest.raises(ValueError, match="max_batch_size"):
        TransformersBackend(tiny.model, tiny.tokenizer, max_batch_size=0)
    with pytest.raises(ValueError, match="does not exist"):
        TransformersBackend("./no/such/checkpoint")


# --- TransformersBackend on the embedded SmolLM2 -------------------------------------------------


def test_smollm2_batched_greedy_equals_one_by_one(smol):
    # "Hi" is answered in about ten tokens and ends with <|im_end|> while the other rows run on, so
    # this also covers a finished row leaving the batch mid-decode.
    params = SamplingParams(max_new_tokens=12, temperature=0)
    batched = smol.generate(CONVERSATIONS, params)
    padded_rows = [0, 2]  # shorter than the longest prompt, so left-padded in the batch
    singles = smol.generate([CONVERSATIONS[0]], params) + smol.generate([CONVERSATIONS[2]], params)
    assert [batched[row].text for row in padded_rows] == [g.text for g in singles]
    for row, alone in zip(padded_rows, singles, strict=True):
        together = batched[row]
        _check_aligned(together, params)
        assert together.completion_ids == alone.completion_ids
        assert max(abs(a - b) for a, b in zip(together.logprobs, alone.logprobs, strict=True)) < 1e-3
    hello = batched[0]
    assert hello.text.strip() and hello.finish_reason == "stop"
    assert hello.completion_ids[-1] in smol.eos_token_ids  # EOS kept in the ids ...
    assert "<|im_end|>" not in hello.text  # ... but not in the text
    assert smol.tokenizer.decode(hello.completion_ids[:-1]) == hello.text
    assert batched[1].finish_reason == "length" and len(batched[1].completion_ids) == 12


def test_smollm2_stop_strings(smol):
    params = SamplingParams(max_new_tokens=24, temperature=0, stop=("!", "?"))
    [generation] = smol.generate([CONVERSATIONS[0]], params)
    assert generation.finish_reason == "stop"
    assert generation.text.endswith(("!", "?")) and generation.text.count("!") + generation.text.count("?") == 1
    assert smol.tokenizer.decode(generation.completion_ids).startswith(generation.text)
    assert len(generation.logprobs) == len(generation.completion_ids)


def test_shared_prefix_length_leaves_every_prompt_a_token():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # a GRPO group: all but the last token
    assert shared_prefix_length([[1, 2, 3]]) == 2 and shared_prefix_length([]) == 0
    assert shared_prefix_length([[7, 2], [1, 2]]) == 0


@pytest.mark.parametrize("params", [SamplingParams(max_new_tokens=16, temperature=0), SamplingParams(16, seed=5)])
def test_smollm2_prefill_strategies_change_nothing(smol, params):
    # A long shared system prompt, users of different lengths (so the rows are padded between the shared
    # prefix and their own suffix) and a repeated prompt, as in a GRPO group.
    system = {"role": "system", "content": "You predict web pages. Be brief and precise. " * 8}
    users = ["Click [12].", "Type 'hello world' into the search box [7] and press Enter.", "Click [12]."]
    conversations = [[system, {"role": "user", "content": user}] for user in users]
    assert shared_prefix_length([smol.chat_prompt_ids(c) for c in conversations]) >= MIN_SHARED_PREFIX
    prefilled = smol.prefilled_rows
    shared = smol.generate(conversations, params)
    assert smol.prefilled_rows == prefilled + 2  # the repeated prompt's rest is computed once
    variants = []  # no shared prefix; rows prefilled in one padded batch (the accelerator path); both
    for share_prefix, rows_alone in ((False, True), (True, False), (False, False)):
        smol.share_prefix, smol.prefill_rows_alone = share_prefix, rows_alone
        try:
            variants.append(smol.generate(conversations, params))
        finally:
            smol.share_prefix, smol.prefill_rows_alone = True, True
    for full in variants:
        for a, b in zip(shared, full, strict=True):
            _check_aligned(a, params)
            assert a.text == b.text and a.completion_ids == b.completion_ids and a.prompt_ids == b.prompt_ids
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3
    # The system prompt's KV cache is kept between calls, and a single prompt starts from it too.
    smol.share_prefix = False
    try:
        alone_full = smol.generate(conversations[2:], params)
    finally:
        smol.share_prefix = True
    hits = smol.prefix_states.hits
    again, alone = smol.generate(conversations, params), smol.generate(conversations[2:], params)
    assert smol.prefix_states.hits == hits + 2
    for a, b in zip([*again, *alone], [*variants[0], *alone_full], strict=True):
        assert a.completion_ids == b.completion_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3


def test_a_next_turn_prefills_only_what_extends_the_last_prompt(smol):
    system = {"role": "system", "content": "You are a web agent. Answer with one action, e.g. click [12]. " * 8}
    first = [system, {"role": "user", "content": "Page: [12] button 'Submit', [13] textbox 'Name'. Your action?"}]
    params = SamplingParams(max_new_tokens=6, temperature=0)
    assert smol.prompt_states is None  # a world model's or judge's prompts extend none: kept for a policy only
    smol = TransformersBackend(smol.model, smol.tokenizer, frozen=True, keep_prompts=True)  # an evaluated policy
    [answer] = smol.generate([first], params)
    later = [*first, {"role": "assistant", "content": answer.text}, {"role": "user", "content": "Edits: [13] 'Ann'."}]
    hits, rows = smol.prompt_states.hits, smol.prefilled_rows
    [again] = smol.generate([later], params)
    assert smol.prompt_states.hits == hits + 1 and smol.prefilled_rows == rows + 1
    smol.share_prefix = False  # the reference: the whole prompt prefilled, nothing kept or reused
    try:
        [reference] = smol.generate([later], params)
    finally:
        smol.share_prefix = True
    assert smol.prompt_states.hits == hits + 1
    assert again.completion_ids == reference.completion_ids and again.prompt_ids == reference.prompt_ids
    assert max(abs(x - y) for x, y in zip(again.logprobs, reference.logprobs, strict=True)) < 1e-3


def test_prompt_states_keep_within_their_bytes_and_extend_the_longest_prompt():
    import torch

    from dynaweb_env.llm.kv_cache import GrowingCache, PromptStates

    def cache(length: int) -> GrowingCache:
        made = GrowingCache()
        made.update(torch.ones(1, 2, length, 4), torch.ones(1, 2, length, 4), 0)
        return made

    per_token = 2 * 2 * 4 * 4  # keys and values, 2 heads of 4 floats
    states = PromptStates(max_bytes=per_token * 10)
    states.keep([1, 2, 3], cache(3))
    states.keep([1, 2, 3, 4, 5], cache(5))
    assert states.longest([1, 2, 3, 4, 5, 6], 0)[0] == 5 and states.longest([1, 2, 3, 9], 0)[0] == 3
    assert states.longest([1, 2, 3], 0)[0] == 0  # a token must be left to prefill
    assert states.longest([1, 2, 3, 9], 3)[0] == 0  # no longer than the shared head: nothing gained
    states.keep([7, 8, 9], cache(3))  # 11 tokens kept > 10: the oldest goes
    assert states.longest([1, 2, 3, 9], 0)[0] == 0 and states.longest([1, 2, 3, 4, 5, 6], 0)[0] == 5
    states.keep(list(range(20)), cache(20))  # larger than all it may keep: not kept, nothing dropped
    assert states.longest([7, 8, 9, 1], 0)[0] == 3


def test_a_live_model_keeps_no_prefix_between_calls(smol):
    live = TransformersBackend(smol.model, smol.tokenizer)  # e.g. the trainer's policy: its weights change
    assert live.prefix_states is None and live.prompt_states is None and smol.prefix_states is not None
    assert TransformersBackend(smol.model, smol.tokenizer, frozen=True).prefix_states is not None  # an evaluated one


def test_cut_at_repeated_line():
    assert cut_at_repeated_line("CHANGE [1]: a\nREMOVE [2]\nCHANGE [1]: a\nmore") == "CHANGE [1]: a\nREMOVE [2]\n"
    assert cut_at_repeated_line("a\n\n\nb\n  a  \n") == "a\n\n\nb\n"  # blank lines never count
    assert cut_at_repeated_line("a\nb\na") is None  # the last line is not complete yet
    assert cut_at_repeated_line("") is None
    # A line that loops on itself (a greedy world model's "naledi, naledi, ...") ends the text before that line; a
    # password field's bullets, a rule of dashes or a word said twice do not.
    assert cut_at_repeated_line("a\nText 'Amiti, naledi, naledi, naledi, naledi, naledi, naledi, nal") == "a\n"
    assert cut_at_repeated_line("a\nb, b, b, b, b, b, b, b\n") is None  # one letter a piece: not a loop
    for line in ("\u2022 " * 20, "-" * 40, "Nunc. Nunc. Nunc.", "abcabcabcabcabc"):
        assert cut_at_repeated_line(f"x\n{line}\ny\n") is None, line
    # Servers cannot stop there, so their text is cut afterwards.
    assert OpenAIBackend._finish(
        {"finish_reason": "length"}, "x\ny\nx\nx\n", SamplingParams(stop_at_repeated_line=True)
    ) == ("x\ny\n", "stop")


def test_smollm2_stops_at_a_repeated_line(smol):
    # Greedy SmolLM2 lists the days, then loops on "Sunday" until the token limit.
    conversation = [{"role": "user", "content": "List the days of the week, then list them again."}]
    [looping] = smol.generate([conversation], SamplingParams(max_new_tokens=60, temperature=0))
    [stopped] = smol.generate(
        [conversation], SamplingParams(max_new_tokens=60, temperature=0, stop_at_repeated_line=True)
    )
    assert looping.finish_reason == "length" and cut_at_repeated_line(looping.text) is not None
    assert stopped.finish_reason == "stop" and len(stopped.completion_ids) < len(looping.completion_ids)
    assert stopped.text == cut_at_repeated_line(looping.text)
    assert stopped.completion_ids == looping.completion_ids[: len(stopped.completion_ids)]


# --- make_backend --------------------------------------------------------------------------------


def test_make_backend_caches_by_spec(tiny):
    assert make_backend("tiny-random") is tiny
    assert make_backend(" tiny-random ") is tiny
    assert make_backend(tiny) is tiny
    fresh = make_backend("tiny-random", cache=False)
    assert fresh is not tiny and isinstance(fresh, TransformersBackend)
    assert make_backend("tiny-random", max_batch_size=2) is not tiny
    assert make_backend("tiny-random", max_batch_size=2) is make_backend({"model": "tiny-random", "max_batch_size": 2})


def test_clear_backend_cache(tiny):
    clear_backend_cache()
    again = make_backend("tiny-random")
    assert again is not tiny
    assert (
        again.generate(CONVERSATIONS[:1], GREEDY)[0].completion_ids
        == tiny.generate(CONVERSATIONS[:1], GREEDY)[0].completion_ids
    )


def test_spec_grammar():
    assert parse_backend_spec("openai:Qwen/Qwen2.5-7B@http://127.0.0.1:8000/v1") == {
        "backend": "openai",
        "model": "Qwen/Qwen2.5-7B",
        "base_url": "http://127.0.0.1:8000/v1",
    }
    assert parse_backend_spec("vllm:org/model") == {"backend": "vllm", "model": "org/model"}
    assert parse_backend_spec("hf:org/model") == {"backend": "transformers", "model": "org/model"}
    assert parse_backend_spec("transformers:tiny-random") == {"backend": "transformers", "model": "tiny-random"}
    assert parse_backend_spec({"backend": "openai", "model": "m", "base_url": "http://x"})["backend"] == "openai"


def test_spec_query_options_reach_the_backend():
    assert parse_backend_spec("transformers:tiny-random?dtype=bfloat16") == {
        "backend": "transformers",
        "model": "tiny-random",
        "dtype": "bfloat16",
    }
    assert parse_backend_spec("ct2:tiny-random?quantization=int8")["quantization"] == "int8"
    backend = make_backend("tiny-random?dtype=bfloat16", cache=False)
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    [generation] = backend.generate(CONVERSATIONS[:1], GREEDY)
    assert generation.completion_ids


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "   ",
        "no-such-model",
        "org/some-hub-id",  # hub ids must say hf:
        "openai:model-without-url",
        "openai:@http://127.0.0.1:1/v1",
        "vllm:",
        "hf:",
        "mystery:thing",
        "tiny-random?dtype",  # a query without a value
        "tiny-random?colour=red",  # an unknown option
        "ct2:tiny-random?dtype=bfloat16",  # an option of another backend
        "tiny-random?dtype=float7",
        {"backend": "nope", "model": "m"},
        {"backend": "openai", "model": "m"},
        {"model": ""},
        42,
    ],
)
def test_bad_specs_raise_value_error(spec):
    with pytest.raises(ValueError):
        make_backend(spec)


def test_vllm_missing_gives_a_clear_import_error():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="dynaweb\\[vllm\\]"):
            make_backend("vllm:tiny-random")
    else:  # pragma: no cover - only on GPU machines with vLLM
        pytest.skip("vLLM is installed")


# --- OpenAIBackend against a real local HTTP server -----------------------------------------------


class _FakeServer(ThreadingHTTPServer):
    """An OpenAI-compatible server on 127.0.0.1 that answers from a TransformersBackend (vLLM-style fields)."""

    daemon_threads = True

    def __init__(self, backend: TransformersBackend) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.backend = backend
        self.fail_next = 0  # answer 503 to this many requests first
        self.status = 200  # answer this error status to every request when not 200
        self.plain = False  # behave like a server without vLLM extensions (no ids, stop strings dropped)
        self.no_completions = False
        self.delay = 0.0
        self.requests: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: _FakeServer

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests.append({"path": self.path, **body})
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            failing = server.fail_next > 0
            server.fail_next -= failing
        try:
            time.sleep(server.delay)
            if failing:
                return self._reply(503, {"error": {"message": "warming up"}})
            if server.status != 200:
                return self._reply(server.status, {"error": {"message": "bad request: unknown field"}})
            if self.path == "/v1/completions" and server.no_completions:
                return self._reply(404, {"detail": "Not Found"})
            params = SamplingParams(
                max_new_tokens=body["max_tokens"],
                temperature=body["temperature"],
                top_p=body["top_p"],
                seed=body.get("seed"),
                stop=tuple(body.get("stop") or ()),
            )
            if self.path == "/v1/chat/completions":
                [gen] = server.backend.generate([body["messages"]], params)
            elif self.path == "/v1/completions":
                [gen] = server.backend.generate_from_ids([body["prompt"]], params)
            else:
                return self._reply(404, {"detail": "Not Found"})
            self._reply(200, self._response(body, gen, params))
        finally:
            with server.lock:
                server.in_flight -= 1

    def _response(self, body: dict, gen: Generation, params: SamplingParams) -> dict:
        text, stop_reason = gen.text, None
        for stop in params.stop:
            if gen.finish_reason == "stop" and text.endswith(stop):
                stop_reason = stop
                text = text[: -len(stop)] if self.server.plain else text
        tokens = [f"token_id:{token}" if not self.server.plain else "?" for token in gen.completion_ids]
        choice: dict = {"index": 0, "finish_reason": gen.finish_reason, "stop_reason": stop_reason}
        if self.path == "/v1/chat/completions":
            choice["message"] = {"role": "assistant", "content": text}
            entries = zip(tokens, gen.logprobs, strict=True)
            choice["logprobs"] = {"content": [{"token": t, "logprob": v} for t, v in entries]}
        else:
            choice["text"] = text
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": gen.logprobs}
        response = {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice]}
        if not self.server.plain:
            choice["token_ids"] = gen.completion_ids
            response["prompt_token_ids"] = gen.prompt_ids
        return response


@pytest.fixture()
def server(tiny):
    server = _FakeServer(tiny)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture()
def client(server):
    backend = OpenAIBackend(server.url, "tiny-random", max_retries=2, retry_backoff=0.01, timeout=30)
    yield backend
    backend.close()


def test_openai_chat_round_trip_matches_local_backend(server, client, tiny):
    remote = client.generate(CONVERSATIONS, GREEDY)
    local = tiny.generate(CONVERSATIONS, GREEDY)
    assert [(g.text, g.completion_ids, g.prompt_ids, g.finish_reason) for g in remote] == [
        (g.text, g.completion_ids, g.prompt_ids, g.finish_reason) for g in local
    ]
    assert all(len(g.logprobs) == len(g.completion_ids) for g in remote)
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["logprobs"] is True
    assert request["model"] == "tiny-random" and request["max_tokens"] == 6 and request["n"] == 1


def test_openai_seeds_are_per_request_and_reproducible(server, client):
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=11)
    first = client.generate([CONVERSATIONS[0]] * 3, params)
    seeds = [request["seed"] for request in server.requests]
    assert len(set(seeds)) == 3 and all(0 <= seed < 2**31 for seed in seeds)
    assert sorted(seeds) == sorted(request_seeds(11, 3))  # the one seed rule of servers and engines
    assert [g.completion_ids for g in client.generate([CONVERSATIONS[0]] * 3, params)] == [
        g.completion_ids for g in first
    ]


def test_openai_batch_is_sent_concurrently(server, client):
    server.delay = 0.3  # each request waits before answering, so sequential requests could never overlap
    client.generate(CONVERSATIONS + CONVERSATIONS[:1], SamplingParams(max_new_tokens=2, temperature=0))
    assert len(server.requests) == 4
    assert server.max_in_flight >= 2


def test_openai_generate_from_ids(server, client, tiny):
    prompts = [tiny.chat_prompt_ids(c) for c in CONVERSATIONS]
    remote = client.generate_from_ids(prompts, GREEDY)
    local = tiny.generate_from_ids(prompts, GREEDY)
    assert [(g.completion_ids, g.prompt_ids) for g in remote] == [(g.completion_ids, g.prompt_ids) for g in local]
    assert sorted(request["prompt"] for request in server.requests) == sorted(prompts)  # arrival order varies


def test_openai_plain_server_without_ids(server, client):
    server.plain = True
    params = SamplingParams(max_new_tokens=30, temperature=0, stop=("\n",))
    [generation] = client.generate([CONVERSATIONS[0]], params)
    assert generation.completion_ids == [] and generation.prompt_ids == []
    assert generation.logprobs and generation.text.endswith("\n")  # stop string re-appended from stop_reason
    [from_ids] = client.generate_from_ids([[1, 2, 3]], params)
    assert from_ids.prompt_ids == [1, 2, 3] and from_ids.completion_ids == []


def test_openai_retries_then_succeeds(server, client):
    server.fail_next = 2
    [generation] = client.generate([CONVERSATIONS[0]], GREEDY)
    assert generation.completion_ids and len(server.requests) == 3


def test_openai_gives_up_with_generation_error(server, client):
    server.fail_next = 10
    with pytest.raises(GenerationError, match="503"):
        client.generate([CONVERSATIONS[0]], GREEDY)
    assert len(server.requests) == 3  # one try + max_retries=2


def test_openai_client_error_is_not_retried(server, client):
    server.status = 400
    with pytest.raises(GenerationError, match="400.*vllm_extensions=False"):
        client.generate([CONVERSATIONS[0]], GREEDY)
    assert len(server.requests) == 1


def test_openai_missing_completions_endpoint(server, client):
    server.no_completions = True
    with pytest.raises(NotImplementedError, match="generate_from_ids"):
        client.generate_from_ids([[1, 2, 3]], GREEDY)


def test_openai_server_down_fails_fast():
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, retry_backoff=0.01, timeout=5)
    start = time.perf_counter()
    with pytest.raises(GenerationError, match="ConnectError"):
        backend.generate(CONVERSATIONS[:2], GREEDY)
    assert time.perf_counter() - start < 3
    backend.close()


def test_openai_spec_and_argument_errors(server):
    backend = make_backend(f"openai:tiny-random@{server.url}", cache=False)
    assert isinstance(backend, OpenAIBackend) and backend.base_url == server.url
    assert backend.generate([], GREEDY) == []
    with pytest.raises(ValueError):
        backend.generate([[{"role": "user"}]], GREEDY)
    with pytest.raises(ValueError):
        backend.generate_from_ids([[]], GREEDY)
    backend.close()
    with pytest.raises(GenerationError, match="closed"):
        backend.generate(CONVERSATIONS[:1], GREEDY)
    with pytest.raises(ValueError):
        OpenAIBackend("127.0.0.1:8000", "m")
    with pytest.raises(ValueError):
        OpenAIBackend("http://127.0.0.1:8000/v1", "m", max_concurrency=0)
