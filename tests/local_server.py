"""Local sockets for tests: an HTTP server on 127.0.0.1 run on a thread, and a free port for a server a test starts."""

from __future__ import annotations

import socket
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it), for a server a test starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
