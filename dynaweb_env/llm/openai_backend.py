"""Generation through any OpenAI-compatible HTTP server (``vllm serve``, SGLang, llama.cpp, ...).

Speaks plain HTTP with ``httpx`` (no ``openai`` package). A batch is sent as concurrent requests, one
per conversation, so it costs one round trip in wall time and the server batches them itself.

Every call is bounded. A request that gets no whole answer within ``timeout`` seconds (a body
that trickles in is cut then too; one larger than :data:`MAX_RESPONSE_BYTES` is refused) fails without a
retry (a generation that timed out would only time out again); a refused or dropped connection and
a 408/429/5xx answer are retried ``max_retries`` times with jittered exponential backoff (by
``httpx-retries``' transport). Whatever still fails reaches the caller as a
:class:`~dynaweb_env.llm.base.GenerationError`: :class:`~dynaweb_env.llm.base.BackendUnavailableError`
(unreachable, timed out) or :class:`~dynaweb_env.llm.base.BackendResponseError` (an HTTP error, or a
body that is not a completion: not JSON, a JSON list, a non-numeric logprob ...). Both can be set
from a spec string: ``openai:<model>@http://host:8000/v1?timeout=300&retries=0``.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from httpx_retries import Retry, RetryTransport

from .base import (
    BackendResponseError,
    BackendUnavailableError,
    Conversation,
    Generation,
    GenerationError,
    SamplingParams,
    cut_at_repeated_line,
    request_seeds,
    validate_conversation,
)

_TOKEN_ID = re.compile(r"token_id:(\d+)")
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
#: Failures worth another attempt: the request never reached a working server. A read timeout is not
#: among them: the server took the request and is slow, and would be as slow again.
_RETRY_EXCEPTIONS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)
#: Default seconds a request may take, generation included. A CPU world model behind a server can
#: need several minutes per batch: raise it there (``?timeout=600``).
DEFAULT_TIMEOUT = 120.0
#: Default retries after a failed connection or a 408/429/5xx answer.
DEFAULT_MAX_RETRIES = 2
#: Longest single wait between two attempts, whatever a ``Retry-After`` header asks for.
MAX_BACKOFF_WAIT = 10.0
#: Largest answer body read from a server (a completion of 100k tokens with logprobs is far below it).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class OpenAIBackend:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` over an OpenAI-compatible server.

    :meth:`generate` posts to ``{base_url}/chat/completions`` (the server applies the chat
    template); :meth:`generate_from_ids` posts token-id prompts to ``{base_url}/completions``.

    What comes back depends on the server:

    - ``logprobs`` are requested (``logprobs: true``) and filled when the server returns them. They
      are the server's numbers: vLLM reports the model's raw log-probabilities (before temperature
      and top-p) unless started with ``--logprobs-mode processed_logprobs``.
    - ``completion_ids`` and ``prompt_ids`` are filled from vLLM's ``return_token_ids`` fields (or
      from ``token_id:N`` logprob tokens); servers that return neither leave them empty (with
      :meth:`generate_from_ids`, ``prompt_ids`` are always the ids sent).
    - Stop strings are kept in ``text`` (vLLM's ``include_stop_str_in_output``; otherwise re-appended
      when the server reports which one matched in ``stop_reason``).

    Args:
        base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        model: The model name the server expects in requests.
        api_key: Sent as a bearer token; defaults to ``$OPENAI_API_KEY`` if set.
        timeout: Seconds allowed per request, generation included (:data:`DEFAULT_TIMEOUT`); a
            request that times out is not retried, so a hung server costs at most this per call.
        max_concurrency: Most requests in flight at once.
        max_retries: Retries after a refused or dropped connection or a 408/429/5xx answer.
        retry_backoff: Backoff factor of the retries: the wait before retry ``k`` is drawn up to
            ``retry_backoff * 2**k`` seconds (at most :data:`MAX_BACKOFF_WAIT`).
        vllm_extensions: Send vLLM's extra request fields (``return_token_ids``,
            ``return_tokens_as_token_ids``, ``include_stop_str_in_output``, ``skip_special_tokens``).
            vLLM and SGLang accept them; set ``False`` for servers that reject unknown fields.
        model_name: Name for logs (default: ``model``).

    Example:
        >>> backend = OpenAIBackend("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_concurrency: int = 32,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_backoff: float = 0.5,
        vllm_extensions: bool = True,
        model_name: str | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("model must be a non-empty string")
        if not (math.isfinite(timeout) and timeout > 0) or max_concurrency < 1 or max_retries < 0 or retry_backoff < 0:
            raise ValueError("timeout must be finite and > 0, max_concurrency >= 1, max_retries and retry_backoff >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.model_name = model_name or model
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.vllm_extensions = vllm_extensions
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = float(timeout)
        retry = Retry(
            total=max_retries,
            allowed_methods=["POST"],  # generation requests have no side effect worth protecting
            status_forcelist=sorted(_RETRY_STATUS),
            retry_on_exceptions=_RETRY_EXCEPTIONS,
            backoff_factor=retry_backoff,
            max_backoff_wait=MAX_BACKOFF_WAIT,
        )
        limits = httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency)
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=RetryTransport(httpx.HTTPTransport(limits=limits), retry=retry),
        )
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="dynaweb-openai")
        self._closed = threading.Event()

    def close(self) -> None:
        """Close the HTTP connections and worker threads."""
        self._closed.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def __del__(self) -> None:  # best effort; close() is the clean way
        try:
            self.close()
        except Exception:
            pass

    def _sampling_fields(self, params: SamplingParams, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": 1.0 if params.greedy else params.top_p,
            "n": 1,
        }
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        if self.vllm_extensions:
            body.update(
                return_token_ids=True,
                return_tokens_as_token_ids=True,
                include_stop_str_in_output=True,
                skip_special_tokens=True,
            )
        return body

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion per chat conversation with concurrent ``chat/completions`` requests.

        Raises:
            ValueError: If a conversation is malformed.
            GenerationError: If the server cannot be reached after retries or answers with an error.
        """
        messages = [validate_conversation(conversation) for conversation in conversations]
        seeds = request_seeds(params.seed, len(messages))
        bodies = [
            {**self._sampling_fields(params, seed), "messages": conversation, "logprobs": True}
            for conversation, seed in zip(messages, seeds, strict=True)
        ]
        return self._run("chat/completions", bodies, lambda response, body: self._parse_chat(response, params))

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Generate from token-id prompts with concurrent ``completions`` requests.

        Raises:
            ValueError: If a prompt is empty.
            NotImplementedError: If the server has no ``completions`` endpoint.
            GenerationError: If the server cannot be reached after retries or answers with an error.
        """
        prompts = [list(map(int, ids)) for ids in prompt_ids]
        if any(not ids for ids in prompts):
            raise ValueError("every prompt must hold at least one token id")
        seeds = request_seeds(params.seed, len(prompts))
        bodies = [
            {**self._sampling_fields(params, seed), "prompt": ids, "logprobs": 1}
            for ids, seed in zip(prompts, seeds, strict=True)
        ]
        return self._run("completions", bodies, lambda response, body: self._parse_completion(response, body, params))

    def _run(
        self, path: str, bodies: list[dict[str, Any]], parse: Callable[[dict[str, Any], dict[str, Any]], Generation]
    ) -> list[Generation]:
        if not bodies:
            return []
        if self._closed.is_set():
            raise GenerationError("this OpenAIBackend is closed")
        futures = [self._executor.submit(self._post, path, body) for body in bodies]
        try:
            responses = [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()
        generations = []
        for response, body in zip(responses, bodies, strict=True):
            try:
                generations.append(parse(response, body))
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
                raise BackendResponseError(
                    f"{self.base_url}/{path} returned a malformed completion ({type(error).__name__}: {error}): "
                    f"{str(response)[:300]}"
                ) from error
        return generations

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/{path}"
        attempts = f"{self.max_retries + 1} attempt(s)"
        try:
            status, text = self._read_bounded(path, body)
        except httpx.TimeoutException as error:
            raise BackendUnavailableError(f"{url} did not answer within {self.timeout:g} s ({error!r})") from error
        except httpx.HTTPError as error:  # refused, reset, protocol error ... after the retries
            raise BackendUnavailableError(f"{url} failed after {attempts}: {type(error).__name__}: {error}") from error
        if status == 404 and path == "completions":
            raise NotImplementedError(
                f"{url} answered 404: this server has no token-id completions endpoint, so "
                "generate_from_ids is unavailable; use generate (chat) or a vLLM server"
            )
        if status >= 400:
            retried = f" after {attempts}" if status in _RETRY_STATUS else ""
            hint = " (if it rejects unknown fields, pass vllm_extensions=False)" if self.vllm_extensions else ""
            raise BackendResponseError(
                f"{url} answered HTTP {status}{retried}{hint}: {text[:500]}",
                status=status,
            )
        try:
            payload = json.loads(text)
        except ValueError as error:
            raise BackendResponseError(f"{url} returned a body that is not JSON: {text[:300]!r}") from error
        if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or not payload["choices"]:
            raise BackendResponseError(f"{url} returned no completion object with choices: {text[:300]!r}")
        return payload

    def _read_bounded(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        """POST ``body`` and read the answer within ``timeout`` seconds in all and :data:`MAX_RESPONSE_BYTES`.

        httpx's timeout bounds each socket read, not the whole answer: a server that trickles a byte
        at a time, or streams without end, would hold the step (and the memory) without bound.
        """
        deadline = time.monotonic() + self.timeout
        url = f"{self.base_url}/{path}"
        with self._client.stream("POST", f"/{path}", json=body) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise BackendResponseError(
                        f"{url} sent more than {MAX_RESPONSE_BYTES} bytes; the answer is dropped"
                    )
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the answer was still arriving after {self.timeout:g} s")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")

    @staticmethod
    def _finish(choice: dict[str, Any], text: str, params: SamplingParams) -> tuple[str, str]:
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and stop_reason in params.stop and not text.endswith(stop_reason):
            text += stop_reason  # the server dropped the stop string; the contract keeps it
        if params.stop_at_repeated_line and (cut := cut_at_repeated_line(text)) is not None:
            return cut, "stop"  # a server cannot stop there, so the repetition is cut afterwards
        return text, "length" if choice.get("finish_reason") == "length" else "stop"

    @staticmethod
    def _ids_from_tokens(tokens: Sequence[Any]) -> list[int]:
        matches = [_TOKEN_ID.fullmatch(token) if isinstance(token, str) else None for token in tokens]
        return [int(match.group(1)) for match in matches] if matches and all(matches) else []

    def _parse_chat(self, response: dict[str, Any], params: SamplingParams) -> Generation:
        choice = response["choices"][0]
        message = choice.get("message") or {}
        text, finish = self._finish(choice, _text(message.get("content")), params)
        entries = (choice.get("logprobs") or {}).get("content") or []
        logprobs = _logprobs([entry.get("logprob") for entry in entries])
        completion_ids = choice.get("token_ids") or self._ids_from_tokens([entry.get("token") for entry in entries])
        prompt_ids = response.get("prompt_token_ids") or choice.get("prompt_token_ids") or []
        return Generation(text, _token_ids(prompt_ids), _token_ids(completion_ids), logprobs, finish)

    def _parse_completion(self, response: dict[str, Any], body: dict[str, Any], params: SamplingParams) -> Generation:
        choice = response["choices"][0]
        text, finish = self._finish(choice, _text(choice.get("text")), params)
        logprob_block = choice.get("logprobs") or {}
        logprobs = _logprobs(logprob_block.get("token_logprobs") or [])
        completion_ids = choice.get("token_ids") or self._ids_from_tokens(logprob_block.get("tokens") or [])
        return Generation(text, list(body["prompt"]), _token_ids(completion_ids), logprobs, finish)


# Checks of the fields a completion carries: a wrong type raises, and the caller reports the whole
# completion as malformed (BackendResponseError) instead of passing garbage on to a trainer.


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"completion text must be a string, got {type(value).__name__}")
    return value


def _logprobs(values: Any) -> list[float]:
    if not isinstance(values, list):
        raise TypeError(f"logprobs must be a list, got {type(values).__name__}")
    logprobs = []
    for value in values:
        if value is None:
            continue
        # Infinity parses from JSON too, and would turn an importance ratio into inf or nan.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"logprob {value!r:.40} is not a number")
        logprobs.append(float(value))
    return logprobs


def _token_ids(ids: Any) -> list[int]:
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TypeError(f"token ids must be a list of integers, got {ids!r:.80}")
    return list(ids)


__all__ = ["OpenAIBackend"]
