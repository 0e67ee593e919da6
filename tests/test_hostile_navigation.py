"""Re-trial of issue #15 (items 1 and 2) on the landed code: the escapes the first fixes missed.

- A backslash is a path separator in a special URL (WHATWG URL standard, as Chromium parses it), so
  ``file:///task/..\\..\\etc/passwd`` climbed out of the task directory past the pre-check, and
  ``http://evil.example\\@allowed.example/`` passed as a page of ``allowed.example``.
- Invisible Unicode (a bidi override U+202E, C1 controls, zero-width spaces) passed the control-byte
  check, so a world model could predict ``\\u202efile:///etc/passwd`` and the dream showed it.
- ``miniwob:///%2e%2e/...`` climbed out of the portable page directory.
- A relative URL predicted by a world model was shown as the dream's URL, where a browser shows an
  absolute one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest

from dynaweb_env.experts import parse_axtree
from dynaweb_env.navigation import NavigationPolicy

sys.path.insert(0, str(Path(__file__).parent))
from test_dream_navigation import URL, PredictingBackend, _dream  # noqa: E402
from test_dream_navigation import start_file as start_file  # noqa: E402  (the fixture)

POLICY = NavigationPolicy.for_start_url(URL)


@pytest.mark.parametrize(
    "url",
    [
        "file:///srv/pages/miniwob/..\\..\\..\\etc\\passwd",
        "..\\..\\..\\etc\\passwd",
        "file:///srv/pages/miniwob\\..\\..\\..\\etc\\passwd",
        "\u202efile:///etc/passwd",  # right-to-left override: relative to the task, shown reversed
        "file:///srv/pages/miniwob/a\x85.html",  # C1 control (NEL)
        "file:///srv/pages/miniwob/a\u200b.html",  # zero-width space
        "file:///srv/pages/miniwob/a\u2028.html",  # line separator
        "file:///srv/pages/miniwob/a\u3000.html",  # ideographic space
    ],
)
def test_backslashes_and_invisible_characters_cannot_leave_the_task(url: str) -> None:
    assert "refused" in POLICY.refusal(url, base_url=URL)


def test_backslashes_are_read_as_a_browser_reads_them() -> None:
    site = NavigationPolicy.for_start_url("http://allowed.example/shop")
    assert not site.allows("http://evil.example\\@allowed.example/")  # Chromium: host evil.example
    assert site.allows("http://allowed.example\\@evil.example/")  # Chromium: host allowed.example
    assert POLICY.refusal("file:///srv/pages/miniwob/a.html?next=..\\..\\x", base_url=URL) == ""  # query kept
    assert POLICY.refusal("sub\\page.html", base_url=URL) == ""  # inside the directory it stays allowed
    assert POLICY.refusal("caf\u00e9.html", base_url=URL) == ""  # printable Unicode is not invisible


@pytest.mark.parametrize("url", ["miniwob:///%2e%2e/etc/passwd", "miniwob:///..\\etc", "miniwob:///a/%2E%2E/%2e%2e/x"])
def test_portable_pages_cannot_climb_out_by_encoding(url: str) -> None:
    portable = NavigationPolicy.for_start_url("miniwob:///click-button.html")
    assert not portable.allows(url)
    assert portable.allows("miniwob:///sub/../click-dialog.html")


@pytest.mark.parametrize(
    "predicted", ["\u202efile:///etc/passwd", "file:///srv/pages/miniwob/..\\..\\..\\etc\\passwd", "a\u200eb.html"]
)
def test_dream_refuses_predicted_addresses_a_browser_would_leave_by(start_file: str, predicted: str) -> None:
    env = _dream(start_file, PredictingBackend(predicted))
    env.reset(seed=0)
    observation, _, _, _, info = env.step("click [13]")
    assert observation["url"] == URL
    assert observation["last_action_error"] == POLICY.refusal(predicted, base_url=URL)
    assert info["world_model_error"].startswith("predicted URL refused")


def test_dream_shows_a_predicted_relative_url_as_a_browser_does(start_file: str) -> None:
    env = _dream(start_file, PredictingBackend("next.html"))
    env.reset(seed=0)
    observation, *_ = env.step("click [13]")
    assert observation["url"] == "file:///srv/pages/miniwob/next.html" and observation["last_action_error"] == ""


# ---------------------------------------------------------------------------- real Chromium


def _reset(env: gym.Env) -> tuple[dict, str]:
    observation, _ = env.reset(options={"task": "miniwob.enter-text", "task_seed": 3})
    return observation, observation["url"]


@pytest.mark.browser
@pytest.mark.parametrize("style", ["absolute", "relative"])
def test_backslash_traversal_is_refused_before_the_browser_in_the_dream_s_words(
    real_web_env: gym.Env, style: str
) -> None:
    observation, url = _reset(real_web_env)
    directory = url.rsplit("/", 1)[0]
    climb = "..\\" * (directory.count("/") + 2) + "etc\\passwd"
    target = f"{directory}/{climb}" if style == "absolute" else climb
    observation, reward, terminated, truncated, info = real_web_env.step(f"goto [{target}]")
    # The pre-check refuses it (before: Chromium was sent there and only its request guard stopped it,
    # with a message naming a different URL than the dream's).
    assert observation["last_action_error"] == NavigationPolicy.for_start_url(url).refusal(target, base_url=url)
    assert observation["url"] == url and "root:x:0" not in observation["axtree"]
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, "")


@pytest.mark.browser
def test_a_link_climbing_out_by_backslashes_is_refused(real_web_env: gym.Env) -> None:
    observation, url = _reset(real_web_env)
    climb = "..\\" * (url.count("/") + 2) + "etc\\passwd"
    real_web_env.unwrapped.run_in_browser(
        lambda page: page.evaluate(
            "href => document.body.insertAdjacentHTML('beforeend', `<a id=zz href='${href}'>climb</a>`)", climb
        )
    )
    observation, *_ = real_web_env.step("scroll [down]")
    bid = next(node.bid for node in parse_axtree(observation["axtree"]) if node.name == "climb")
    observation, _, terminated, _, _ = real_web_env.step(f"click [{bid}]")
    assert "refused: outside the allowed domains" in observation["last_action_error"]
    assert observation["url"] == url and "root:x:0" not in observation["axtree"] and not terminated
