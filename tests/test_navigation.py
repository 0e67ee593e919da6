"""The agent stays inside its task (issue #15, items 1 and 10): one URL policy, enforced in real Chromium.

The browser tests reset the shared MiniWoB++ env and try to leave the task every way an agent can:
``goto`` to local files, directory listings, pages it writes itself and browser pages; clicks on
links; scripts, ``javascript:`` links and pop-ups that navigate. None may show anything outside the
task's page directory, every refusal says so in ``last_action_error``, and the episode goes on with
the page as it was.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from dynaweb_env.experts import find_all_by_role, parse_axtree
from dynaweb_env.navigation import NavigationPolicy
from dynaweb_env.spaces import web_observation_space

START = "file:///srv/pages/miniwob/click-button.html"
POLICY = NavigationPolicy.for_start_url(START)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "file:///",
        "file:///srv/pages/",
        "file:///srv/pages/miniwob/../core/secret.html",
        "file:///srv/pages/miniwob/..%2f..%2fetc/passwd",
        "file://otherhost/srv/pages/miniwob/x.html",
        "data:text/html,<script>alert(1)</script>",
        "blob:file:///0c1e0c1e",
        "javascript:alert(document.cookie)",
        "JavaScript:alert(1)",
        "chrome://version",
        "chrome-extension://abc/x.html",
        "view-source:file:///etc/passwd",
        "about:version",
        "http://169.254.169.254/latest/meta-data/",
        "http://localhost:7770/",
        "ftp://example.com/",
        "file:///srv/pages/miniwob/a\x00.html",
        "file:///srv/pages/miniwob/a b.html",
        "http://[::1",
    ],
)
def test_policy_refuses_everything_outside_the_task(url: str) -> None:
    refusal = POLICY.refusal(url, base_url=START)
    assert refusal.startswith("navigation") and "refused" in refusal
    assert not POLICY.allows(url)


@pytest.mark.parametrize(
    "url",
    ["file:///srv/pages/miniwob/click-dialog.html", "click-dialog.html", "./x/y.html?a=b#c", "about:blank"],
)
def test_policy_allows_the_task_directory(url: str) -> None:
    assert POLICY.refusal(url, base_url=START) == ""


def test_policy_for_sites_and_explicit_lists() -> None:
    site = NavigationPolicy.for_start_url("http://localhost:7770/shop")
    assert site.domains == ("localhost:7770",) and site.directories == ()
    assert site.allows("http://localhost:7770/cart") and not site.allows("http://localhost:7771/")
    assert not site.allows("file:///etc/passwd")
    listed = NavigationPolicy.for_start_url(START, ["file://", "file:///srv/extra", "example.com"])
    assert listed.directories == ("file:///srv/pages/miniwob/", "file:///srv/extra/")
    assert listed.allows("https://shop.example.com/") and listed.allows("file:///srv/extra/a.html")
    assert "(example.com, file:///srv/pages/miniwob/, file:///srv/extra/)" in listed.refusal("file:///etc/x")


def test_policy_for_portable_miniwob_pages() -> None:
    # Trajectories read without the miniwob package keep the portable form; a dream from them stays on it.
    portable = NavigationPolicy.for_start_url("miniwob:///click-button.html")
    assert (
        portable.refusal("miniwob:///click-dialog.html") == ""
        and portable.refusal("other.html", "miniwob:///a.html") == ""
    )
    assert not portable.allows("miniwob:///../etc/passwd") and not portable.allows("file:///etc/passwd")
    assert not POLICY.allows("miniwob:///click-dialog.html")  # a real page's policy never admits the portable form


# ---------------------------------------------------------------------------- real Chromium

SECRET_MARKERS = ("root:x:0", "Index of /", "127.0.0.1", "pwned")  # /etc/passwd, listings, /etc/hosts, agent pages


def _assert_stayed(observation: dict, start_url: str) -> None:
    assert observation["url"] == start_url
    assert observation in web_observation_space()
    assert not any(marker in observation["axtree"] for marker in SECRET_MARKERS), observation["axtree"][:500]


def _reset(env: gym.Env) -> tuple[dict, str]:
    observation, _ = env.reset(options={"task": "miniwob.enter-text", "task_seed": 3})
    return observation, observation["url"]


def _textbox(observation: dict) -> str:
    return find_all_by_role(parse_axtree(observation["axtree"]), "textbox")[0].bid


@pytest.mark.browser
@pytest.mark.parametrize(
    "target",
    [
        "file:///etc/passwd",
        "file:///",
        "../",
        "data:text/html,<script>document.write('x')</script>",
        "javascript:document.body.innerHTML='pwned'",
        "chrome://version",
        "about:version",
        "blob:file:///0c1e0c1e",
        "http://127.0.0.1:9/",
    ],
)
def test_goto_outside_the_task_is_refused(real_web_env: gym.Env, target: str) -> None:
    observation, url = _reset(real_web_env)
    observation, reward, terminated, truncated, info = real_web_env.step(f"goto [{target}]")
    assert "refused" in observation["last_action_error"], observation["last_action_error"]
    assert observation["last_action_error"] == NavigationPolicy.for_start_url(url).refusal(target, base_url=url)
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, "")
    _assert_stayed(observation, url)
    assert "pwned" not in observation["axtree"]


@pytest.mark.browser
def test_goto_inside_the_task_directory_is_allowed(real_web_env: gym.Env) -> None:
    _, url = _reset(real_web_env)
    observation, *_ = real_web_env.step("goto [click-dialog.html]")
    assert observation["last_action_error"] == "" and observation["url"] == url.rsplit("/", 1)[0] + "/click-dialog.html"


_PAGE_TRAPS = """() => {
  const add = (html) => document.body.insertAdjacentHTML('beforeend', html);
  add('<a id="t1" href="file:///etc/passwd">passwords</a>');
  add('<button id="t2" onclick="location.href=\\'file:///\\'">listing</button>');
  add('<a id="t3" href="javascript:location.href=\\'file:///etc/hosts\\'">js link</a>');
  add('<button id="t4" onclick="window.open(\\'file:///etc/passwd\\')">popup</button>');
  add('<a id="t5" href="data:text/html,hello">data link</a>');
  add('<form id="t6" action="file:///etc/passwd"><button id="t6b">form</button></form>');
}"""


@pytest.mark.browser
@pytest.mark.parametrize("trap", ["passwords", "listing", "js link", "popup", "data link", "form"])
def test_page_navigations_outside_the_task_are_stopped_in_the_browser(real_web_env: gym.Env, trap: str) -> None:
    observation, url = _reset(real_web_env)
    textbox = _textbox(observation)
    real_web_env.step(f"type [{textbox}] [kept] [0]")
    real_web_env.unwrapped.run_in_browser(lambda page: page.evaluate(_PAGE_TRAPS))
    observation, *_ = real_web_env.step("scroll [down]")  # a fresh tree with the traps' bids
    nodes = [node for node in parse_axtree(observation["axtree"]) if node.name == trap and node.bid]
    assert nodes, observation["axtree"]
    observation, reward, terminated, truncated, info = real_web_env.step(f"click [{nodes[0].bid}]")
    # The task's page is untouched (its typed text survives), and the episode goes on.
    assert "value='kept'" in observation["axtree"]
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, "")
    _assert_stayed(observation, url)
    if trap != "data link":  # Chromium itself never lets a page open a data: URL at the top level
        assert "refused: outside the allowed domains" in observation["last_action_error"]
    open_urls = real_web_env.unwrapped.run_in_browser(lambda page: [p.url for p in page.context.pages])
    assert all(open_url in ("", "about:blank", url) for open_url in open_urls), open_urls


# ---------------------------------------------------------------------------- tabs (issue #15, item 10)


@pytest.mark.browser
def test_tab_errors_say_what_exists(real_web_env: gym.Env) -> None:
    env = real_web_env.unwrapped
    observation, url = _reset(real_web_env)
    observation, _, terminated, _, _ = real_web_env.step("tab_focus [99]")
    assert observation["last_action_error"] == "tab_focus: there is no tab 99; the open tabs are 0"
    observation, _, terminated, _, _ = real_web_env.step("close_tab")
    assert observation["last_action_error"] == "close_tab refused: the last open tab cannot be closed"
    assert observation["url"] == url and not terminated
    env.max_tabs = 1
    try:
        observation, _, terminated, _, _ = real_web_env.step("new_tab")
        assert observation["last_action_error"].startswith("new_tab refused: 1 tabs are open") and not terminated
    finally:
        env.max_tabs = 8
    # A MiniWoB++ task lives in one tab: BrowserGym ends the episode on the first new one; then step() raises.
    observation, reward, terminated, truncated, info = real_web_env.step("new_tab")
    assert observation["last_action_error"] == "" and observation["url"] == "about:blank"
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["task_info"] == {"error": "invalid page, terminating task"}
    with pytest.raises(gym.error.ResetNeeded, match="the episode has ended"):
        real_web_env.step("tab_focus [0]")
