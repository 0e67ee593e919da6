"""Cross-thread micro-batching: concurrent calls merge into one batch; results reach their callers."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.llm.base import Generation, GenerationError, SamplingParams
from dynaweb_env.llm.batching import BatchingBackend, merged_seed, shared_batching_backend


class EchoBackend:
    """Answers each conversation with its last message; records each call's size and seed."""

    model_name = "echo"

    def __init__(self, delay: float = 0.2, fail: bool = False):
        self.delay, self.fail = delay, fail
        self.calls: list[tuple[int, int | None]] = []
        self.concurrent = 0
        self.most_concurrent = 0
        self._lock = threading.Lock()

    def generate(self, conversations, params):
        with self._lock:
            self.concurrent += 1
            self.most_concurrent = max(self.most_concurrent, self.concurrent)
        try:
            time.sleep(self.delay)
            if self.fail:
                raise GenerationError("model crashed")
            if any(conversation[-1]["content"] == "bad" for conversation in conversations):
                raise ValueError("bad prompt")
            self.calls.append((len(conversations), params.seed))
            return [Generation(text=conversation[-1]["content"]) for conversation in conversations]
        finally:
            with self._lock:
                self.concurrent -= 1

    def generate_from_ids(self, prompt_ids, params):
        return [Generation(text=str(ids)) for ids in prompt_ids]


def _on_threads(function, count: int, warm_up=None) -> list:
    """``function(i)`` on ``count`` threads released together; ``warm_up(i)`` first, in step, on the same threads."""
    results: list = [None] * count
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        try:
            if warm_up is not None:
                barrier.wait()
                warm_up(index)
            barrier.wait()
            results[index] = function(index)
        except Exception as error:  # returned, so the test sees it
            results[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_concurrent_calls_become_one_batch_and_each_caller_gets_its_own_answers():
    inner = EchoBackend()
    backend = BatchingBackend(inner, max_wait_s=0.5)
    params = SamplingParams(max_new_tokens=8)

    def warm_up(index: int) -> None:
        # The first caller finds no other active thread and goes alone; after this round every
        # thread is known to be active, so the next round waits for all of them.
        backend.generate([_ask(f"warm {index}")], params)
        inner.calls.clear() if index == 0 else None

    results = _on_threads(lambda i: backend.generate([_ask(f"{i}a"), _ask(f"{i}b")], params), 4, warm_up)
    assert [[g.text for g in result] for result in results] == [[f"{i}a", f"{i}b"] for i in range(4)]
    assert inner.calls[-1] == (8, None) and inner.most_concurrent == 1
    assert backend.model_name == "echo"  # other attributes are the wrapped backend's


def test_different_sampling_forms_separate_batches_and_seeds_merge_deterministically():
    inner = EchoBackend(delay=0.05)
    backend = BatchingBackend(inner, max_wait_s=0.5)
    greedy, sampled = SamplingParams(temperature=0.0, seed=1), SamplingParams(temperature=0.7, seed=2)
    warm_up = lambda i: backend.generate([_ask("warm")], SamplingParams(max_new_tokens=3))  # noqa: E731
    _on_threads(lambda i: backend.generate([_ask(str(i))], greedy if i % 2 else sampled), 4, warm_up)
    assert sorted(call for call in inner.calls if call[1] is not None) == [(2, 1), (2, 2)]  # seeds kept
    assert merged_seed([3, 4]) == merged_seed([3, 4]) != merged_seed([4, 5])
    assert merged_seed([3, None]) is None and merged_seed([7, 7]) == 7


def test_a_lone_thread_is_not_delayed_and_keeps_its_seed():
    inner = EchoBackend(delay=0.0)
    backend = BatchingBackend(inner, max_wait_s=30.0)
    start = time.monotonic()
    for seed in (5, 6):
        assert backend.generate([_ask("x")], SamplingParams(seed=seed))[0].text == "x"
    assert time.monotonic() - start < 10  # would be >= 30 s had it waited for company
    assert inner.calls == [(1, 5), (1, 6)]
    assert backend.generate([], SamplingParams()) == []
    assert backend.generate_from_ids([[1, 2]], SamplingParams())[0].text == "[1, 2]"


def test_a_failed_model_fails_the_batch_but_a_bad_prompt_fails_only_its_caller():
    inner = EchoBackend(fail=True, delay=0.05)
    backend = BatchingBackend(inner, max_wait_s=0.5)
    results = _on_threads(lambda i: backend.generate([_ask(str(i))], SamplingParams()), 3)
    assert all(isinstance(result, GenerationError) and "model crashed" in str(result) for result in results)
    inner.fail = False
    prompts = ["bad", "fine", "also fine"]
    warm_up = lambda i: backend.generate([_ask("warm")], SamplingParams())  # noqa: E731
    backend.batch_sizes.clear()
    results = _on_threads(lambda i: backend.generate([_ask(prompts[i])], SamplingParams()), 3, warm_up)
    assert isinstance(results[0], ValueError) and [r[0].text for r in results[1:]] == prompts[1:]
    assert backend.batch_sizes[-2:] == [1, 1]  # the merged batch failed and was retried call by call


def test_bad_arguments_and_sharing():
    with pytest.raises(ValueError, match="generation backend"):
        BatchingBackend(object())
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchingBackend(EchoBackend(), max_batch_size=0)
    inner = EchoBackend()
    shared = shared_batching_backend(inner)
    assert shared_batching_backend(inner) is shared and shared_batching_backend(shared) is shared


def test_dream_envs_on_threads_share_one_batch_per_step():
    # Real envs and a real (tiny random) model: three envs built from one spec share a queue.
    kwargs = {"world_model": "tiny-random", "judge": "world_model", "max_new_tokens": 8, "judge_max_new_tokens": 4}
    envs = [gym.make("DreamWeb-v0", dream_length=2, **kwargs) for _ in range(3)]
    backends = {id(env.unwrapped.dynamics.world_model.backend) for env in envs}
    assert len(backends) == 1
    batcher = envs[0].unwrapped.dynamics.world_model.backend
    assert isinstance(batcher, BatchingBackend)

    def episode(index: int) -> list[bool]:
        env = envs[index]
        env.reset(seed=index, options={"task": "miniwob.click-button", "task_seed": 0})
        ended = []
        for _ in range(2):
            *_, info = env.step("click [13]")
            ended.append(bool(info.get("end_reason")) and not info["judged"] and bool(info["judge_error"]))
        return ended

    episode(0)  # loads the model once, alone
    batcher.batch_sizes.clear()
    results = _on_threads(episode, 3)
    assert results == [[False, True]] * 3  # the random judge was asked at the end and gave no verdict
    # Two world-model steps and one judge call per env: merged across the three threads.
    assert sum(batcher.batch_sizes) == 9 and max(batcher.batch_sizes) == 3
    assert len(batcher.batch_sizes) < 9
