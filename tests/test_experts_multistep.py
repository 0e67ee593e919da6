"""The multi-step MiniWoB++ experts: each decision on trees copied from real pages, then on real pages."""

from __future__ import annotations

import gymnasium as gym
import pytest

from dynaweb_env.actions import parse_action
from dynaweb_env.experts import EXPERTS, ExpertError, get_expert
from dynaweb_trainer.collect import record_episode

NEW_TASKS = sorted(task for task, expert in EXPERTS.items() if type(expert).__module__.endswith("miniwob_multistep"))


def _act(task: str, goal: str, tree: str, last_action: str = "", error: str = "") -> str:
    observation = {"goal": goal, "url": "file:///x.html", "axtree": tree, "last_action": last_action,
                   "last_action_error": error}  # fmt: skip
    reasoning, action = get_expert(f"miniwob.{task}").act(observation)
    assert reasoning and parse_action(action)
    return action


def test_registry_covers_at_least_fifteen_tasks_with_many_multi_step_ones() -> None:
    assert len(EXPERTS) >= 15 and len(NEW_TASKS) >= 6
    assert {"miniwob.login-user-popup", "miniwob.navigate-tree", "miniwob.click-menu"} <= set(NEW_TASKS)
    assert all(task.startswith("miniwob.") and EXPERTS[task].task_id == task for task in NEW_TASKS)


# ---------------------------------------------------------------------------- forms

LOGIN = 'Enter the username "cierra" and the password "CA9" into the text fields and press login.'
LOGIN_FORM = """RootWebArea 'Login User Popup Task', focused
\t[14] paragraph ''
\t\t[16] textbox ''{user}
\t[17] paragraph ''
\t\t[19] textbox ''{disabled}
\t[20] button 'OK'{disabled}"""
POPUP = """
\t[22] paragraph ''
\t\tStaticText 'Your session is about to time out.'
\t[24] paragraph ''
\t\t[25] button 'OK'
\t\t[26] button 'Cancel'"""


def test_login_user_popup_fills_closes_popups_and_retypes_the_password() -> None:
    empty = LOGIN_FORM.format(user="", disabled="")
    filled = LOGIN_FORM.format(user=" value='cierra'", disabled="")
    popup = LOGIN_FORM.format(user=" value='cierra'", disabled=", disabled=True") + POPUP
    assert _act("login-user-popup", LOGIN, empty) == "type [16] [cierra] [0]"
    assert _act("login-user-popup", LOGIN, filled, "type [16] [cierra] [0]") == "type [19] [CA9] [0]"
    assert _act("login-user-popup", LOGIN, filled, "type [19] [CA9] [0]") == "click [20]"
    # A popup opened when the password field got the focus: cancel it (its OK fails the task), then
    # type the password again, since the tree cannot show whether it went in.
    assert _act("login-user-popup", LOGIN, popup, "type [19] [CA9] [0]") == "click [26]"
    assert _act("login-user-popup", LOGIN, filled, "click [26]") == "type [19] [CA9] [0]"
    assert _act("login-user-popup", LOGIN, filled, "type [19] [CA9] [0]", error="TimeoutError") == "type [19] [CA9] [0]"


def test_text_experts_transform_type_and_submit() -> None:
    tree = "RootWebArea 'Enter Text Task'\n\t[14] textbox ''{value}\n\t[15] button 'Submit'"
    goal = 'Type "KANESHA" in all lower case letters in the text input and press Submit.'
    assert _act("enter-text-2", goal, tree.format(value="")) == "type [14] [kanesha] [0]"
    assert _act("enter-text-2", goal, tree.format(value=" value='kanesha'")) == "click [15]"
    upper = 'Type "joye" in all upper case letters in the text input and press Submit.'
    assert _act("enter-text-2", upper, tree.format(value=" value='joye'")) == "type [14] [JOYE] [0]"
    dynamic = 'Enter "wP3" into the text field and press Submit.'
    assert _act("enter-text-dynamic", dynamic, tree.format(value=" value='wp3'")) == "type [14] [wP3] [0]"
    assert _act("enter-text-dynamic", dynamic, tree.format(value=" value='wP3'")) == "click [15]"


AUTOCOMPLETE = """RootWebArea 'Use Autocomplete Task', focused
\t[17] textbox 'Tags:'{value}
\t[18] button 'Submit'"""
SUGGESTIONS = """
\t[19] list ''
\t\t[21] listitem ''
\t\t\tStaticText 'Timor-Leste'
\t\t[22] listitem ''
\t\t\tStaticText 'Tinland'"""


def test_use_autocomplete_types_the_start_then_picks_a_suggestion_that_fits() -> None:
    goal = 'Enter an item that starts with "Ti" and ends with "and".'
    assert _act("use-autocomplete", goal, AUTOCOMPLETE.format(value="")) == "type [17] [Ti] [0]"
    assert _act("use-autocomplete", goal, AUTOCOMPLETE.format(value=" value='Ti'") + SUGGESTIONS) == "click [22]"
    assert _act("use-autocomplete", goal, AUTOCOMPLETE.format(value=" value='Tinland'")) == "click [18]"
    any_end = 'Enter an item that starts with "Ti".'
    assert _act("use-autocomplete", any_end, AUTOCOMPLETE.format(value=" value='Ti'") + SUGGESTIONS) == "click [21]"


# ---------------------------------------------------------------------------- menus, trees, accordions

MENU = """RootWebArea 'Click Menu Task', focused
\t[17] menu '', orientation='vertical'
\t\t[19] menuitem 'Joye'
\t\t[21] menuitem 'Amandi', hasPopup='menu'{submenu}
\t\t[45] menuitem 'Celestyna'"""
SUBMENU = """
\t\t[23] menu '', orientation='vertical'
\t\t\t[25] menuitem 'Olga', hasPopup='menu'
\t\t\t[35] menuitem 'Melesa'"""


def test_click_menu_hovers_down_the_path_then_clicks_the_leaf() -> None:
    goal = "Select Amandi>Olga>Ashlee"
    assert _act("click-menu", goal, MENU.format(submenu="")) == "hover [21]"
    assert _act("click-menu", goal, MENU.format(submenu=SUBMENU)) == "hover [25]"
    assert _act("click-menu", "Select Amandi>Melesa", MENU.format(submenu=SUBMENU)) == "click [35]"
    assert _act("click-menu", "Select Joye", MENU.format(submenu="")) == "click [19]"
    with pytest.raises(ExpertError, match="Nobody"):
        _act("click-menu", "Select Nobody>Olga", MENU.format(submenu=""))


# Ids from the real page: a file takes two ids (item, name), a folder four plus its content.
TREE = """RootWebArea 'Navigate Tree Task', focused
\t[16] list ''
\t\t[17] listitem ''
\t\t\tStaticText 'Michel'{michel}
\t\t[21] listitem ''
\t\t\tStaticText 'Riley'{riley}
\t\t[31] listitem ''
\t\t\tStaticText 'Keli'"""
RILEY_OPEN = """
\t\t\t[24] list ''
\t\t\t\t[25] listitem ''
\t\t\t\t\tStaticText 'Macie'
\t\t\t\t[27] listitem ''
\t\t\t\t\tStaticText 'Enola'"""


def test_navigate_tree_opens_closed_folders_never_clicks_a_wrong_file() -> None:
    goal = 'Navigate through the file tree. Find and click on the folder or file named "Augus".'
    closed = TREE.format(michel="", riley="")
    assert _act("navigate-tree", goal, closed) == "click [17]"  # 17 -> 21: a folder
    michel_open = TREE.format(michel="\n\t\t\t[20] list ''", riley="")
    assert _act("navigate-tree", goal, michel_open) == "click [21]"
    # Macie (25 -> 27) is a file and stays untouched; Enola (27 -> 31) is a closed folder.
    both_open = TREE.format(michel="\n\t\t\t[20] list ''", riley=RILEY_OPEN)
    assert _act("navigate-tree", goal, both_open) == "click [27]"
    found = 'Navigate through the file tree. Find and click on the folder or file named "Macie".'
    assert _act("navigate-tree", found, both_open) == "click [25]"


def test_click_collapsible_expands_then_submits() -> None:
    tree = "RootWebArea 'x'\n\t[16] tab 'Section #46', expanded={expanded}\n\t\t[22] button 'Submit'"
    goal = "Expand the section below and click submit."
    assert _act("click-collapsible", goal, tree.format(expanded="False")) == "click [16]"
    assert _act("click-collapsible", goal, tree.format(expanded="True")) == "click [22]"


# ---------------------------------------------------------------------------- rows of icons

POST = """\tStaticText 'Theresa'
\tStaticText '@laoreet'
\tStaticText 'Elit aliquam.'
\t[41] image ''
\t[42] image ''
\t[43] image ''
\t[45] image ''{menu}
\tStaticText 'Roth'
\tStaticText '@alan'
\tStaticText 'Sed. At.'
\t[61] image ''
\t[62] image ''
\t[63] image ''
\t[65] image ''"""
MORE_MENU = """
\t[46] list ''
\t\t[47] listitem ''
\t\t\tStaticText 'Share via DM'
\t\t[50] listitem ''
\t\t\tStaticText 'Mute @laoreet'"""


def test_social_media_clicks_the_post_icons_and_its_more_menu() -> None:
    feed = "RootWebArea 'Social Media Task'\n" + POST.format(menu="")
    open_menu = "RootWebArea 'Social Media Task'\n" + POST.format(menu=MORE_MENU)
    assert _act("social-media", 'For the user @alan, click on the "Like" button.', feed) == "click [63]"
    assert _act("social-media", 'For the user @laoreet, click on the "Reply" button.', feed) == "click [41]"
    mute = 'For the user @laoreet, click on the "Mute" button.'
    assert _act("social-media", mute, feed) == "click [45]"
    assert _act("social-media", mute, open_menu) == "click [50]"
    # The menu that is open belongs to another post: open @alan's own.
    assert _act("social-media", 'For the user @alan, click on the "Share via DM" button.', open_menu) == "click [65]"
    observation = {"goal": mute, "url": "", "axtree": feed, "last_action": "click [45]", "last_action_error": ""}
    reasoning, action = get_expert("miniwob.social-media").act(observation)
    assert action == "click [45]" and "changed nothing" in reasoning


def test_email_rows_end_in_trash_then_star() -> None:
    inbox = """RootWebArea 'Email Inbox Task'
\t[16] heading 'Primary'
\t[17] image ''
\tStaticText 'Anne'
\tStaticText 'Ullamcorper. Im..'
\t[26] image ''
\t[27] image ''
\tStaticText 'Misty'
\tStaticText 'Ut.'
\t[36] image ''
\t[37] image ''"""
    assert _act("email-inbox-delete", "Find the email by Misty and click the trash icon to delete it.", inbox) == (
        "click [36]"
    )
    star = "Find the email by Anne and click the star icon to mark it as important."
    assert _act("email-inbox-important", star, inbox) == "click [27]"
    with pytest.raises(ExpertError, match="Zed"):
        _act("email-inbox-important", star.replace("Anne", "Zed"), inbox)


# ---------------------------------------------------------------------------- short tasks


def test_short_task_experts() -> None:
    buttons = "RootWebArea 'x'\n\t[12] button 'ONE'\n\t[13] button 'TWO'"
    sequence = "Click button ONE, then click button TWO."
    assert _act("click-button-sequence", sequence, buttons) == "click [12]"
    assert _act("click-button-sequence", sequence, buttons, "click [12]") == "click [13]"
    # A click on a covered button times out: Tab brings the focus to it, Enter presses it. A failed
    # click that left the button focused did land.
    one_focused = buttons.replace("'ONE'", "'ONE', focused")
    assert _act("click-button-sequence", sequence, buttons, "click [12]", error="Timeout") == "press [Tab]"
    assert _act("click-button-sequence", sequence, buttons, "press [Tab]") == "press [Tab]"
    assert _act("click-button-sequence", sequence, one_focused, "press [Tab]") == "press [Enter]"
    assert _act("click-button-sequence", sequence, one_focused, "press [Enter]") == "click [13]"
    assert _act("click-button-sequence", sequence, one_focused, "click [12]", error="Timeout") == "click [13]"
    assert _act("click-test-2", "Click button ONE.", buttons) == "click [12]"
    assert _act("click-test-2", "Click button ONE.", buttons, "click [12]", error="Timeout") == "press [Tab]"
    assert _act("click-test-2", "Click button ONE.", one_focused, "press [Tab]") == "press [Enter]"
    dialog = (
        "RootWebArea 'x'\n\t[17] dialog ''\n\t\t[20] button 'Close'\n\t\t[27] button 'Cancel'\n\t\t[28] button 'OK'"
    )
    assert _act("click-dialog-2", 'Click the button in the dialog box labeled "x".', dialog) == "click [20]"
    assert _act("click-dialog-2", 'Click the button in the dialog box labeled "OK".', dialog) == "click [28]"
    boxes = "RootWebArea 'x'\n\t[12] textbox ''\n\t[13] textbox ''\n\t[14] textbox ''"
    assert _act("focus-text-2", "Focus into the 3rd input textbox.", boxes) == "click [14]"
    checkboxes = "RootWebArea 'x'\n\t[18] checkbox 'cw', checked='true'\n\t[21] checkbox 'Iq', checked='false'\n" \
        "\t[27] button 'Submit'"  # fmt: skip
    assert _act("click-checkboxes-transfer", "Select Iq and click Submit.", checkboxes) == "click [18]"
    assert _act("click-checkboxes-transfer", "Select cw and click Submit.", checkboxes) == "click [27]"
    with pytest.raises(ExpertError, match="Zz"):
        _act("click-checkboxes-transfer", "Select Zz and click Submit.", checkboxes)


# ---------------------------------------------------------------------------- real pages

#: (task, seed, fewest actions): seeds whose pages take the long branch (a popup, folders to open,
#: a submenu, a More menu, a suggestion list, overlapping buttons).
LONG_BRANCHES = [
    ("miniwob.login-user-popup", 1, 5),
    ("miniwob.navigate-tree", 1, 3),
    ("miniwob.click-menu", 2, 3),
    ("miniwob.social-media", 0, 2),
    ("miniwob.use-autocomplete", 0, 3),
    ("miniwob.click-button-sequence", 8, 4),
]


@pytest.mark.browser
@pytest.mark.parametrize(("task_id", "seed", "fewest_actions"), LONG_BRANCHES)
def test_expert_takes_the_long_branch_on_a_real_page(
    real_web_env: gym.Env, task_id: str, seed: int, fewest_actions: int
) -> None:
    trajectory = record_episode(real_web_env, get_expert(task_id), task_id, seed)
    trace = [(step.action, step.last_action_error) for step in trajectory.steps]
    assert trajectory.success and len(trajectory.actions) >= fewest_actions, trace


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("task_id", NEW_TASKS)
def test_new_expert_solves_its_task_on_real_pages(real_web_env: gym.Env, task_id: str) -> None:
    # benchmarks/expert_success.py measures 50 seeds in parallel browsers; this is the quick check.
    for seed in (100, 101, 102):
        trajectory = record_episode(real_web_env, get_expert(task_id), task_id, seed)
        assert trajectory.success, (seed, [(s.action, s.last_action_error) for s in trajectory.steps])
