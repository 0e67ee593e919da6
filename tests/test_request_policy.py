"""RealWeb-v0 holds every request a page makes to the task's URL policy, inside Chromium (issue #49, item 1).

A MiniWoB++ page copied to a temporary directory is given frames, an image, a script, a ``fetch``, an
XHR and a WebSocket that reach for ``file:///etc/passwd``, a file outside the task's directory, and an
HTTP listener on 127.0.0.1. None of their content may reach the observation, and the listener must
receive nothing, while the page itself (its scripts from ``../core/``) still works.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.navigation import NavigationPolicy, proxy_bypass_rules, url_in_domains

SECRET = "SECRET-OUTSIDE-THE-TASK"
HTTP_SECRET = "SECRET-FROM-LOOPBACK"


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.paths: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.paths.append(self.path)
        body = f"<p>{HTTP_SECRET}</p>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def listener() -> Iterator[_Recorder]:
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def hostile_pages(root: Path, port: int) -> str:
    """MiniWoB++'s pages under ``root/mw`` with a hostile click-button.html; returns their ``MINIWOB_URL``."""
    import miniwob

    shutil.copytree(Path(miniwob.__file__).parent / "html", root / "mw")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.html").write_text(f"<p>{SECRET}</p>")
    (outside / "secret.js").write_text(f"document.title = '{SECRET}';")
    loopback = f"http://127.0.0.1:{port}"
    hostile = f"""
<iframe src="file:///etc/passwd"></iframe>
<iframe src="{(outside / "secret.html").as_uri()}"></iframe>
<iframe src="../../outside/secret.html"></iframe>
<iframe src="{loopback}/iframe"></iframe>
<img src="{loopback}/img">
<script src="{(outside / "secret.js").as_uri()}"></script>
<script>
fetch("{loopback}/fetch").catch(() => 0);
try {{ const x = new XMLHttpRequest(); x.open("GET", "{loopback}/xhr"); x.send(); }} catch (e) {{}}
try {{ new WebSocket("ws://127.0.0.1:{port}/ws"); }} catch (e) {{}}
</script>
"""
    page = root / "mw" / "miniwob" / "click-button.html"
    page.write_text(page.read_text().replace("<body>", "<body>" + hostile, 1))
    return (root / "mw" / "miniwob").as_uri() + "/"


@pytest.mark.browser
def test_nothing_a_page_loads_leaves_the_task(
    require_browser: None, tmp_path: Path, listener: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIWOB_URL", hostile_pages(tmp_path, listener.server_port))
    env = gym.make("RealWeb-v0", task="miniwob.click-button")
    try:
        observation, _ = env.reset(seed=0)
        time.sleep(1.0)  # a request still on its way would reach the listener by now
        axtree = env.unwrapped.run_in_browser(lambda page: page.title()) + observation["axtree"]
        assert "root:" not in axtree and SECRET not in axtree and HTTP_SECRET not in axtree
        assert listener.paths == []
        guard = env.unwrapped._guard
        assert any(url.endswith("/etc/passwd") for url in guard.blocked)
        # The page itself still works: its own scripts (from ../core/) ran, and the task can be won.
        button = next(line for line in observation["axtree"].splitlines() if "button" in line)
        assert "Click on the" in observation["goal"] and button
        from dynaweb_env.experts import get_expert

        _, action = get_expert("miniwob.click-button").act(observation)
        _, reward, terminated, _, _ = env.step(action)
        assert (reward, terminated) == (1.0, True)
        assert listener.paths == []
    finally:
        env.close()


@pytest.mark.browser
def test_the_issue_repro_prints_false(require_browser: None, tmp_path: Path, listener: _Recorder) -> None:
    url = hostile_pages(tmp_path, listener.server_port)
    code = (
        "import gymnasium as g, dynaweb_env; "
        "print('root:' in g.make('RealWeb-v0', task='miniwob.click-button').reset(seed=0)[0]['axtree'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "MINIWOB_URL": url}, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.browser
def test_the_task_host_may_be_loopback(require_browser: None, tmp_path: Path, listener: _Recorder) -> None:
    """A task whose own host is 127.0.0.1 reaches it (and only it): its start page loads, other ports do not."""
    from dynaweb_env.envs.browser import ensure_playwright
    from dynaweb_env.envs.browser_guard import refusing_proxy

    port = listener.server_port
    policy = NavigationPolicy.for_start_url(f"http://127.0.0.1:{port}/start")
    browser = ensure_playwright().chromium.launch(headless=True)
    try:
        context = browser.new_context(
            service_workers="block", proxy={"server": refusing_proxy(), "bypass": proxy_bypass_rules(policy.domains)}
        )
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/start")
        assert HTTP_SECRET in page.content()
        with pytest.raises(Exception, match="ERR_PROXY_CONNECTION_FAILED"):
            page.goto(f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}/other", timeout=10_000)
    finally:
        browser.close()
    assert listener.paths[0] == "/start" and set(listener.paths) <= {"/start", "/favicon.ico"}


def test_loopback_and_private_addresses_need_to_be_the_task_host() -> None:
    local = NavigationPolicy.for_start_url("file:///srv/mw/miniwob/click-button.html")
    for url in ("http://127.0.0.1:8000/", "http://localhost/", "http://10.0.0.1/", "http://[::1]/", "ws://127.0.0.1/"):
        assert not local.allows(url) and not local.allows_resource(url), url
    own = NavigationPolicy.for_start_url("http://127.0.0.1:8000/miniwob/click-button.html")
    assert own.allows("http://127.0.0.1:8000/x") and not own.allows("http://127.0.0.1:8001/x")
    assert not url_in_domains("http://127.0.0.1/", ["0.0.1"])  # an address has no subdomains
    assert proxy_bypass_rules(["example.com", "127.0.0.1:8000"]) == "example.com,.example.com,127.0.0.1:8000"
    # A local page's shared resources sit beside its directory; nothing else on the disk does.
    assert local.allows_resource("file:///srv/mw/core/core.js") and not local.allows("file:///srv/mw/core/core.js")
    for url in ("file:///etc/passwd", "file:///srv/other/x.js", "file:///srv/mw/../x.js", "file:///srv/mw/a\u202eb"):
        assert not local.allows_resource(url), url
