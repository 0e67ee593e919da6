"""A local HTTP server on 127.0.0.1 run on a thread, for tests of model backends against real sockets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer


def serve_on_a_thread(server: ThreadingHTTPServer) -> Iterator[ThreadingHTTPServer]:
    """Serve ``server`` until the generator closes; then release hung handlers (``server.release``) and stop.

    Use it as a fixture body: ``yield from serve_on_a_thread(MyServer())``.
    """
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()  # a handler still hanging on purpose must not keep the server alive
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
