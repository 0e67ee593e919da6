"""MiniWoB++ URLs are stored portably and resolved for the machine that reads them.

The shipped data was recorded on one machine; on another install, dream pages must show the URL that
real pages show there. The browser test copies the ``miniwob`` package to another path and runs both
envs against that copy in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from dynaweb_env.data import urls
from dynaweb_env.data.io import read_trajectories, write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.data.urls import MINIWOB_SCHEME, portable_urls, resolve_urls

BUILTIN = Path(str(files("dynaweb_env.data") / "builtin"))
OTHER_BASE = "file:///opt/elsewhere/lib/python3.12/site-packages/miniwob/html/miniwob/"


def test_shipped_data_holds_no_machine_path():
    for path in BUILTIN.glob("*.jsonl"):
        text = path.read_text(encoding="utf-8")
        assert "site-packages" not in text and "file://" not in text, path
        assert MINIWOB_SCHEME in text


def test_portable_and_resolved_forms_round_trip(monkeypatch):
    monkeypatch.delenv("MINIWOB_URL", raising=False)
    recorded = "RootWebArea 'T', url='file:///root/.pyenv/x/site-packages/miniwob/html/miniwob/click-button.html'"
    portable = portable_urls(recorded)
    assert portable == "RootWebArea 'T', url='miniwob:///click-button.html'"
    assert resolve_urls(portable, OTHER_BASE) == f"RootWebArea 'T', url='{OTHER_BASE}click-button.html'"
    assert resolve_urls("http://example.com/x.html", OTHER_BASE) == "http://example.com/x.html"
    # A served copy named by $MINIWOB_URL is made portable too, and resolved back to it.
    monkeypatch.setenv("MINIWOB_URL", "http://127.0.0.1:8080/miniwob/")
    assert portable_urls("http://127.0.0.1:8080/miniwob/login-user.html") == "miniwob:///login-user.html"
    assert resolve_urls("miniwob:///login-user.html") == "http://127.0.0.1:8080/miniwob/login-user.html"


def test_readers_resolve_and_writers_store_portably(tmp_path, monkeypatch):
    monkeypatch.setattr(urls, "miniwob_pages_url", lambda: OTHER_BASE)
    monkeypatch.delenv("MINIWOB_URL", raising=False)
    trajectories = read_trajectories(BUILTIN / "miniwob_small.jsonl")
    trajectory = next(t for t in trajectories if t.task_id == "miniwob.click-button")
    assert trajectory.steps[0].url == OTHER_BASE + "click-button.html"
    assert f"url='{OTHER_BASE}click-button.html'" in trajectory.steps[0].axtree
    trajectory.steps[0].changes = f"The URL changed to {OTHER_BASE}done.html."  # every text field travels
    out = tmp_path / "copy.jsonl"
    write_trajectories(out, [trajectory])
    stored = json.loads(out.read_text())["steps"][0]
    assert stored["url"] == "miniwob:///click-button.html"
    assert stored["changes"] == "The URL changed to miniwob:///done.html."
    assert read_trajectories(out)[0].steps == trajectory.steps


def test_dream_start_pages_use_this_machines_pages(monkeypatch):
    from dynaweb_env.envs.dream import DreamWebEnv

    monkeypatch.setattr(urls, "miniwob_pages_url", lambda: OTHER_BASE)
    env = DreamWebEnv(world_model="tiny-random", tasks=["miniwob.click-button"], include_intermediate=False)
    observation, _ = env.reset(seed=0)
    assert observation["url"] == OTHER_BASE + "click-button.html"
    assert OTHER_BASE in observation["axtree"]


def test_non_miniwob_records_are_untouched(tmp_path):
    trajectory = Trajectory("t", "web.x", "g", "real", [Step("https://example.com/a", "RootWebArea 'A'")])
    write_trajectories(tmp_path / "t.jsonl", [trajectory])
    assert read_trajectories(tmp_path / "t.jsonl")[0] == trajectory


_SAME_URL_SCRIPT = """
import json, miniwob, dynaweb_env
import gymnasium as gym
from dynaweb_env.envs.dream import DreamWebEnv
dream = DreamWebEnv(world_model="tiny-random", tasks=["miniwob.click-button"], include_intermediate=False)
dream_obs, _ = dream.reset(seed=0)
real = gym.make("RealWeb-v0", task="miniwob.click-button")
real_obs, _ = real.reset(seed=0)
real.close()
print(json.dumps({"package": miniwob.__file__, "dream": dream_obs["url"], "real": real_obs["url"]}))
"""


@pytest.mark.browser
def test_dream_and_real_pages_show_the_same_url_on_another_install(tmp_path, require_browser):
    import miniwob

    site = tmp_path / "other install" / "site-packages"
    shutil.copytree(Path(miniwob.__file__).parent, site / "miniwob")
    environment = {key: value for key, value in os.environ.items() if key != "MINIWOB_URL"}
    repository = str(Path(__file__).resolve().parents[1])
    environment["PYTHONPATH"] = os.pathsep.join([str(site), repository, environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _SAME_URL_SCRIPT], env=environment, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["package"].startswith(str(site))
    assert seen["dream"] == seen["real"] == (site / "miniwob" / "html" / "miniwob" / "click-button.html").as_uri()
