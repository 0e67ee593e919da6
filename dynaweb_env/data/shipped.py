"""What ships with the package: its trajectory files, and the split rule they follow.

Both files hold MiniWoB++ trajectories recorded on real pages with ``dynaweb-collect`` (see the
README): ``miniwob_small.jsonl`` the scripted experts' demonstrations (the default SFT data),
``miniwob_explore.jsonl`` the experts with random actions mixed in (failures included), which the world model
also learns from. The dream start states are the experts of the large dataset's train split
(:data:`~dynaweb_env.data.start_states.BUILTIN_START_STATES`, all 24 tasks), and by default also the trainer's
expert-interleaving pool.

The split rule (:func:`split_of`): task seeds ``4 mod 5`` (one in five) are the ``test`` split, the rest ``train``
(the large dataset also sets seeds ``3 mod 5`` apart as ``validation``).
Recorders write it into ``metadata["split"]``; trainers keep ``train``, evaluations ``test``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

#: The package's data directory.
BUILTIN_DIR = Path(str(files("dynaweb_env.data") / "builtin"))
#: Expert demonstrations (9 MiniWoB++ tasks x seeds 0-4).
EXPERT_TRAJECTORIES = BUILTIN_DIR / "miniwob_small.jsonl"
#: Exploration trajectories on the same tasks (seeds 0, 1 and 4).
EXPLORATION_TRAJECTORIES = BUILTIN_DIR / "miniwob_explore.jsonl"
#: Every shipped real transition: what the world model trains and is evaluated on by default.
WORLD_MODEL_TRAJECTORIES = (EXPERT_TRAJECTORIES, EXPLORATION_TRAJECTORIES)
#: ``dynaweb-build-data``'s large dataset as shipped: ``<split>/*.jsonl.xz`` and ``MANIFEST.json`` (checksums of
#: the uncompressed files). Train on a split with ``dynaweb-train-wm --dataset_path <this>/train``.
LARGE_DATA_DIR = Path(str(files("dynaweb_env.data") / "miniwob-large"))

#: ``dynaweb-build-data`` over every task with a scripted expert (53, the long ones included), task seeds 0-9, recorded
#: with RealWeb-v0's current observation (clickable generic elements kept): ``<split>/*.jsonl.xz`` and ``MANIFEST.json``
#: (checksums of the uncompressed files, and actions per episode of each task). Not yet trained on.
ALL_TASKS_DATA_DIR = Path(str(files("dynaweb_env.data") / "miniwob-all"))

#: The judge's data on dreamed pages as shipped (``dynaweb-dream-judge-data``): ``train/`` (final pages dreamed from
#: the large train split, and replayed policy dreams) and ``test/``, with ``MANIFEST.json`` (commands, checksums).
DREAMED_JUDGE_DATA_DIR = Path(str(files("dynaweb_env.data") / "judge-dreamed"))

#: Task seeds ``s`` with ``s % TEST_SEED_MODULUS == TEST_SEED_MODULUS - 1`` form the test split.
TEST_SEED_MODULUS = 5


def real_trajectory_files() -> list[Path]:
    """Every real trajectory file the package ships: the builtin ones and each split of the large dataset."""
    return [*WORLD_MODEL_TRAJECTORIES, *sorted(LARGE_DATA_DIR.glob("*/*.jsonl.xz"))]


def split_of(task_seed: int, *, validation: bool = False) -> str:
    """The split of a task seed: ``"test"`` for seeds ``4 mod 5`` (one in five), else ``"train"``.

    Args:
        task_seed: The MiniWoB++ task seed.
        validation: Also set seeds ``3 mod 5`` apart as ``"validation"`` (the large dataset's three-way split,
            60 / 20 / 20 by seed); the test split is the same either way.
    """
    residue = task_seed % TEST_SEED_MODULUS
    if residue == TEST_SEED_MODULUS - 1:
        return "test"
    return "validation" if validation and residue == TEST_SEED_MODULUS - 2 else "train"


__all__ = [
    "ALL_TASKS_DATA_DIR",
    "BUILTIN_DIR",
    "DREAMED_JUDGE_DATA_DIR",
    "EXPERT_TRAJECTORIES",
    "EXPLORATION_TRAJECTORIES",
    "LARGE_DATA_DIR",
    "TEST_SEED_MODULUS",
    "WORLD_MODEL_TRAJECTORIES",
    "real_trajectory_files",
    "split_of",
]
