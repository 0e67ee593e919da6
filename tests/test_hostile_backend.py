"""Re-trial of issue #15 (item 7) on the landed code: backend answers the first fixes did not bound.

A real HTTP server on 127.0.0.1 that trickles its answer a few bytes at a time never let httpx's
per-read timeout fire, so a step waited as long as the server kept trickling; one that streamed a
huge body was read whole into memory; and ``Infinity`` (valid JSON for Python) passed as a logprob.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from local_server import serve_on_a_thread

from dynaweb_env.llm.base import BackendResponseError, BackendUnavailableError, SamplingParams
from dynaweb_env.llm.openai_backend import OpenAIBackend

CONVERSATION = [{"role": "user", "content": "hi"}]
PARAMS = SamplingParams(max_new_tokens=8, temperature=0)


class _Handler(BaseHTTPRequestHandler):
    server: _HostileServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.path.strip("/").split("/")[0]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if mode == "infinity":
            choice = {"message": {"content": "hi"}, "logprobs": {"content": [{"token": "x", "logprob": "INF"}]}}
            data = json.dumps({"choices": [choice]}).replace('"INF"', "Infinity").encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while not self.server.release.is_set():  # "trickle": 2 bytes every 0.2 s; "flood": 1 MiB chunks
                data = b" " * (2 if mode == "trickle" else 1 << 20)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if mode == "trickle":
                    time.sleep(0.2)
        except OSError:  # the client hung up, as it should
            pass


class _HostileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.release = threading.Event()

    def backend(self, mode: str, timeout: float = 2.0) -> OpenAIBackend:
        url = f"http://127.0.0.1:{self.server_address[1]}/{mode}/v1"
        return OpenAIBackend(url, "m", vllm_extensions=False, timeout=timeout, max_retries=0)


@pytest.fixture(scope="module")
def server():
    yield from serve_on_a_thread(_HostileServer())


def test_a_trickled_answer_is_cut_at_the_timeout(server) -> None:
    backend = server.backend("trickle", timeout=1.5)
    started = time.perf_counter()
    with pytest.raises(BackendUnavailableError, match="did not answer within 1.5 s"):
        backend.generate([CONVERSATION], PARAMS)
    assert time.perf_counter() - started < 5  # before: as long as the server kept trickling
    backend.close()


def test_an_endless_answer_is_refused_at_the_size_limit(server, monkeypatch) -> None:
    monkeypatch.setattr("dynaweb_env.llm.openai_backend.MAX_RESPONSE_BYTES", 8 << 20)
    backend = server.backend("flood", timeout=60)
    with pytest.raises(BackendResponseError, match="sent more than 8388608 bytes"):
        backend.generate([CONVERSATION], PARAMS)
    backend.close()


def test_an_infinite_logprob_is_refused(server) -> None:
    backend = server.backend("infinity")
    with pytest.raises(BackendResponseError, match="logprob inf is not a number"):
        backend.generate([CONVERSATION], PARAMS)
    backend.close()
