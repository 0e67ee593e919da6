"""``dynaweb-dream`` prints a whole dream episode (tiny model: the loop, not the quality)."""

from dynaweb_trainer.dream_demo import main


def test_dream_demo_prints_an_episode(capsys):
    code = main(
        [
            "--policy", "tiny-random", "--world-model", "tiny-random", "--judge", "world-model",
            "--task", "miniwob.click-button",
            "--dream-length", "2", "--policy-max-new-tokens", "8", "--world-model-max-new-tokens", "16",
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "GOAL: " in printed and "--- step 1" in printed and "--- step 2" in printed
    assert "END: " in printed and "POLICY: " in printed


def test_dream_demo_lets_the_scripted_expert_act(capsys):
    """``make demo``'s first command: the expert reads the dreamed page and acts on it."""
    code = main(
        [
            "--policy", "expert", "--world-model", "tiny-random", "--judge", "world-model",
            "--task", "miniwob.click-button", "--dream-length", "1", "--world-model-max-new-tokens", "16",
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "policy expert" in printed and "POLICY: REASON: " in printed and "ACTION: click [" in printed
