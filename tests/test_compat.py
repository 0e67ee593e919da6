"""``dynaweb_env.compat``: each reach into another library's internals works on the installed versions, an
untested version fails loudly, and no module outside ``compat/`` reaches into another library's private names."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import io
import os
import re
import tokenize
from pathlib import Path

import pytest

from dynaweb_env.compat import UntestedVersionError, require_version

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynaweb_env", "dynaweb_trainer")
COMPAT_DIR = ROOT / "dynaweb_env" / "compat"

#: Private names of dynaweb's own objects read outside the class that defines them: (module, name) -> owner.
OWN_PRIVATE_NAMES = {
    ("dynaweb_env/integrations/trl.py", "_episode"): "DreamWebTools, in the same module",
    ("dynaweb_trainer/trainer_policy.py", "_template_ids"): "dynaweb_trainer.encoding.EpisodeEncoder",
}


# ---------------------------------------------------------------------------------------------------- the scan


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each reach into a private name in ``source`` that is not the code's own.

    The patterns: an attribute ``x._name`` whose object is not ``self`` or ``cls`` (``self.env._name`` and
    ``super()._name`` included); an absolute import of a private module or name (``from lib._impl import x``,
    ``from lib import _x``), except from ``dynaweb_*``; and ``getattr``/``hasattr``/``setattr``/``delattr`` of a
    private name given as a string; and ``self._name`` (or ``cls._name``) where the module neither assigns
    ``self._name`` nor defines ``_name``: a private name inherited from another library's class. Comments and
    strings do not count.
    """
    reaches = []
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
    for index in range(2, len(tokens)):
        token, dot, owner = tokens[index], tokens[index - 1], tokens[index - 2]
        if token.type != tokenize.NAME or dot.string != "." or not _is_private(token.string):
            continue
        if owner.type == tokenize.NAME and owner.string in ("from", "import"):
            continue  # a relative import: the package's own module
        if owner.type == tokenize.OP and owner.string not in (")", "]"):
            continue  # ``from .._x``: relative as well
        if owner.string in ("self", "cls") and tokens[index - 3].string != ".":
            continue
        reaches.append((token.start[0], f"{owner.string}.{token.string}"))
    tree = ast.parse(source)
    defined, own_uses = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
            if isinstance(node, ast.ClassDef):  # class attributes, dataclass fields
                for statement in node.body:
                    targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
                    defined.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name):
                        defined.add(element.attr) if element.value.id in ("self", "cls") else None
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
            and _is_private(node.attr)
        ):
            own_uses.append((node.lineno, f"{node.value.id}.{node.attr}"))
    reaches += [(line, what) for line, what in own_uses if what.split(".")[1] not in defined]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("dynaweb"):
            names = [*(node.module or "").split("."), *(alias.name for alias in node.names)]
            reaches += [(node.lineno, f"from {node.module} import {name}") for name in names if _is_private(name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("dynaweb") and any(map(_is_private, alias.name.split("."))):
                    reaches.append((node.lineno, f"import {alias.name}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            reaches.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
    return sorted(set(reaches))


@pytest.mark.parametrize(
    "snippet",
    [
        "env._get_obs()",
        "self.browser_env._active_page_check()",
        "self._browser_env._task_validate()",
        "super()._get_per_token_logps_and_entropies(model)",
        "make()._load()",
        "items[0]._private",
        "from playwright._impl import _connection",
        "from browsergym.core.env import _try_to_extract_legacy_goal",
        "import ctranslate2._private.thing",
        "metrics = getattr(trainer, '_metrics', None)",
        "setattr(module, '_get_global_playwright', f)",
        "class T(SFTTrainer):\n    def f(self):\n        self._total_train_tokens += 1",
        "class V(VectorEnv):\n    def reset(self):\n        return self._add_info({}, {}, 0)",
    ],
)
def test_the_scan_finds_each_kind_of_private_reach(snippet):
    assert private_reaches(snippet + "\n"), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "class A:\n    def __init__(self):\n        self._x, self._y = 1, 2\n    def f(self):\n        return self._x",
        "class B:\n    _registry = {}\n    def f(self):\n        return self._registry, self._g()\n    def _g(s): ...",
        "@dataclass\nclass C:\n    _cache: dict = None\n    def f(self):\n        return self._cache",
        "from ._common import WebEpisode",
        "from .._shared import x",
        "from dynaweb_env.envs.dream import _helper",
        "x = '._not_code'  # env._in_a_comment",
        "module.__name__",
        "getattr(obj, 'public', None)",
    ],
)
def test_the_scan_leaves_own_names_strings_and_dunders_alone(snippet):
    assert private_reaches(snippet + "\n") == []


def test_no_module_outside_compat_reaches_into_private_names():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if COMPAT_DIR in path.parents:
                continue
            relative = path.relative_to(ROOT).as_posix()
            for line, what in private_reaches(path.read_text(encoding="utf-8")):
                if (relative, what.rsplit(".", 1)[-1]) not in OWN_PRIVATE_NAMES:
                    found.append(f"{relative}:{line}: {what}")
    assert not found, "move these into dynaweb_env/compat/ (one function each, with a version check):\n" + "\n".join(
        found
    )


def test_the_own_private_names_allowed_are_still_used():
    """An entry of the allowance that no longer occurs goes, so the allowance cannot grow stale."""
    for (relative, name), owner in OWN_PRIVATE_NAMES.items():
        reaches = private_reaches((ROOT / relative).read_text(encoding="utf-8"))
        assert any(what.endswith("." + name) for _, what in reaches), (relative, name, owner)


# ---------------------------------------------------------------------------------------------------- versions


def test_an_installed_version_in_range_passes_and_is_returned():
    assert require_version("trl", ">=1.0", "a test") == importlib.metadata.version("trl")


def test_an_untested_version_fails_naming_library_range_and_installed_version(monkeypatch):
    monkeypatch.delenv("DYNAWEB_ALLOW_UNTESTED", raising=False)
    installed = importlib.metadata.version("trl")
    with pytest.raises(UntestedVersionError) as raised:
        require_version("trl", "<0.1", "does a test thing")
    message = str(raised.value)
    assert "trl" in message and "<0.1" in message and installed in message and "does a test thing" in message
    with pytest.raises(UntestedVersionError, match="not installed"):
        require_version("no-such-distribution-dynaweb", ">=1", "a test")


def test_allow_untested_turns_the_error_into_a_warning(monkeypatch):
    monkeypatch.setenv("DYNAWEB_ALLOW_UNTESTED", "1")
    with pytest.warns(UserWarning, match="tested with trl<0.2"):
        require_version("trl", "<0.2", "a test")


def test_every_compat_range_holds_the_installed_library():
    from dynaweb_env.compat import browsergym, ctranslate2, gymnasium, playwright, torch, transformers, trl

    ranges = {
        "trl": trl.TRL_TESTED,
        "transformers": transformers.TRANSFORMERS_TESTED,
        "ctranslate2": ctranslate2.CTRANSLATE2_TESTED,
        "playwright": playwright.PLAYWRIGHT_TESTED,
        "browsergym-core": browsergym.BROWSERGYM_TESTED,
        "gymnasium": gymnasium.GYMNASIUM_TESTED,
        "torch": torch.TORCH_TESTED,
    }
    for distribution, tested in ranges.items():
        assert require_version(distribution, tested, "a test")


def test_allow_compiled_graphs_raises_the_limit_and_never_lowers_it():
    import torch._dynamo

    from dynaweb_env.compat.torch import allow_compiled_graphs

    config = torch._dynamo.config
    before = config.recompile_limit
    try:
        config.recompile_limit = 8
        allow_compiled_graphs(64)
        assert config.recompile_limit == 64
        allow_compiled_graphs(16)
        assert config.recompile_limit == 64
    finally:
        config.recompile_limit = before


# ---------------------------------------------------------------------------------------------------- BrowserGym


def test_element_timeout_is_set_in_browsergym_action_code():
    pytest.importorskip("browsergym.core")
    from browsergym.core.action.highlevel import HighLevelActionSet

    from dynaweb_env.compat.browsergym import BROWSERGYM_ELEMENT_TIMEOUT, set_element_timeout

    code = HighLevelActionSet(subsets=["bid"], strict=True).to_python_code("click('12')")
    assert BROWSERGYM_ELEMENT_TIMEOUT in code  # BrowserGym still writes the literal this replaces
    changed = set_element_timeout(code, 1234)
    assert "timeout=1234" in changed and BROWSERGYM_ELEMENT_TIMEOUT not in changed


@pytest.mark.browser
def test_browsergym_and_playwright_reaches_on_a_real_miniwob_page(require_browser):
    import browsergym.core.env as browsergym_env

    from dynaweb_env.compat import browsergym as compat_browsergym
    from dynaweb_env.compat.playwright import stack_capture_is_cheap
    from dynaweb_env.envs.browser import ensure_playwright, stop_playwright
    from dynaweb_env.envs.browsergym_adapter import InMemoryChat, check_task_id, in_memory_chat, make_browser_env

    check_task_id("miniwob.click-button")  # also points BrowserGym at the shipped MiniWoB++ pages
    ensure_playwright()  # this thread's Playwright, which launches Debian's Chromium
    env = make_browser_env("miniwob.click-button")
    extractions = []

    def counting(extraction):
        def counted() -> dict:
            extractions.append(1)
            return extraction()

        return counted

    try:
        compat_browsergym.wrap_observation(env, counting)
        with in_memory_chat(True):
            observation, _ = env.reset(seed=0)
        assert extractions, "reset extracted its observation through the wrapper"
        assert isinstance(env.chat, InMemoryChat)  # set_chat_factory
        assert stack_capture_is_cheap()
        assert browsergym_env._get_global_playwright is ensure_playwright  # use_thread_playwright
        again = compat_browsergym.observe(env)
        assert again["url"] == observation["url"] and again["axtree_object"]["nodes"]
        reward, done, _, task_info = compat_browsergym.validate_task(env)
        assert (reward, done) == (0, False) and isinstance(task_info, dict)  # nothing clicked yet
        compat_browsergym.check_active_page(env)
        assert env.page is env.context.pages[0]
        assert compat_browsergym.legacy_goal(env.goal_object) == observation["goal"]
    finally:
        env.close()
        stop_playwright()


# ---------------------------------------------------------------------------------------------------- Gymnasium


def test_add_vector_info_builds_gymnasiums_info_layout():
    import gymnasium as gym
    import numpy as np

    from dynaweb_env.compat.gymnasium import add_vector_info

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    try:
        infos = add_vector_info(envs, {}, {"reward_note": 1.5, "nested": {"x": "a"}}, 1)
    finally:
        envs.close()
    assert infos["_reward_note"].tolist() == [False, True, False] and infos["reward_note"][1] == 1.5
    assert infos["nested"]["x"][1] == "a" and isinstance(infos["nested"]["_x"], np.ndarray)


# ---------------------------------------------------------------------------------------------------- CTranslate2


def test_ctranslate2_converts_a_loaded_model_and_restores_its_gc(tmp_path):
    pytest.importorskip("ctranslate2")
    import gc

    from ctranslate2.converters import transformers as converter_module

    from dynaweb_env.compat.ctranslate2 import convert_loaded_model
    from dynaweb_env.llm.ct2_convert import load_merged_model

    model, tokenizer = load_merged_model("tiny-random")
    model.config.save_pretrained(tmp_path)
    spec = convert_loaded_model(model, tokenizer, tmp_path)
    spec.validate()
    assert spec.decoder.projection.weight.shape[0] == model.config.vocab_size
    assert converter_module.gc is gc


# ---------------------------------------------------------------------------------------------------- TRL


@pytest.fixture(scope="module")
def tiny_trainer(tmp_path_factory):
    pytest.importorskip("trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset

    from dynaweb_trainer.config import GSPOConfig
    from dynaweb_trainer.identity_env import TASK_ID, make_click_button_vector_env
    from dynaweb_trainer.task_queries import make_task_prompt
    from dynaweb_trainer.trainer import DynaWebTrainer

    config = GSPOConfig(
        output_dir=str(tmp_path_factory.mktemp("compat") / "run"), policy="tiny-random", environment="real",
        num_generations=2, per_device_train_batch_size=2, max_steps=1, expert_frac=0.0, max_turn_tokens=4,
        max_completion_length=64, agent_max_steps=1, report_to="none", gradient_checkpointing=False,
        save_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    prompts = [make_task_prompt("real", TASK_ID, {"task": TASK_ID, "task_seed": 0})]
    return DynaWebTrainer(
        config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        vector_envs={"real": lambda: make_click_button_vector_env(2, max_steps=1)},
    )


def test_trl_reads_the_names_the_trl_reaches_set():
    """The installed GRPOTrainer still reads each attribute compat.trl sets, with the arguments it passes."""
    pytest.importorskip("trl")
    from trl import GRPOTrainer
    from trl.generation.vllm_generation import VLLMGeneration

    source = inspect.getsource(GRPOTrainer)
    for name in ("self._last_loaded_step", "self.vllm_generation.sync_weights()", "self._metrics[", "self._dist"):
        assert name in source, name
    parameters = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert parameters[:8] == [
        "self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
        "compute_aux_loss",
    ]  # fmt: skip
    assert {"prompts", "images", "num_generations"} <= set(inspect.signature(VLLMGeneration.generate).parameters)
    assert "self.max_completion_length" in inspect.getsource(VLLMGeneration)


def test_trl_sft_trainer_counts_tokens_in_the_attributes_count_sft_tokens_sets():
    pytest.importorskip("trl")
    from trl import SFTTrainer

    source = inspect.getsource(SFTTrainer.compute_loss)
    assert "self._total_train_tokens += num_tokens_in_batch // self._tp_size" in source
    assert 'self._metrics[mode]["num_tokens"] = [self._total_train_tokens]' in source


def test_per_token_logps_override_falls_back_to_trl(tiny_trainer):
    import torch
    from trl import GRPOTrainer

    calls = []
    original = type(tiny_trainer).completion_logps_override

    def declining(self, *args, **kwargs):
        calls.append(args[3])
        return None

    input_ids = torch.randint(10, 1000, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(input_ids)
    with torch.no_grad():
        model = tiny_trainer.model
        expected, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(tiny_trainer, model, input_ids, mask, 4)
        try:
            type(tiny_trainer).completion_logps_override = declining
            got, _, _ = tiny_trainer._get_per_token_logps_and_entropies(tiny_trainer.model, input_ids, mask, 4)
        finally:
            type(tiny_trainer).completion_logps_override = original
    assert calls == [4]
    torch.testing.assert_close(got, expected)


def test_weight_sync_metrics_and_fsdp_reaches_on_a_real_trainer(tiny_trainer):
    from dynaweb_env.compat import trl as compat_trl

    assert not tiny_trainer.use_vllm
    try:
        sync = object()
        compat_trl.install_weight_sync(tiny_trainer, sync)
        assert tiny_trainer.vllm_generation is sync and tiny_trainer.use_vllm
        assert tiny_trainer._last_loaded_step != tiny_trainer.state.global_step  # TRL syncs before the next rollout
        compat_trl.mark_weights_synced(tiny_trainer)
        assert tiny_trainer._last_loaded_step == tiny_trainer.state.global_step
    finally:
        tiny_trainer.use_vllm = False
        del tiny_trainer.vllm_generation, tiny_trainer._last_loaded_step
    compat_trl.log_metric(tiny_trainer, "compat/test", 2.5)
    assert tiny_trainer._metrics["train"]["compat/test"] == [2.5]
    del tiny_trainer._metrics["train"]["compat/test"]
    summon = compat_trl.summon_full_params(tiny_trainer)
    assert summon is not None
    with summon(tiny_trainer.model_wrapped, recurse=False):  # a no-op without FSDP, as in TRL's own generation
        pass


def test_vllm_generate_sets_the_budget_for_one_call_only():
    """Unit test of the budget swap around TRL's generator (vLLM needs a GPU; the TRL API is checked above)."""
    from types import SimpleNamespace

    from dynaweb_env.compat.trl import vllm_generate

    class Generator:
        max_completion_length = 256

        def generate(self, prompts, images, num_generations):
            budgets.append(self.max_completion_length)
            return None, [[7] * len(prompt) for prompt in prompts], [[[-0.5]] for _ in prompts], None

    budgets: list[int] = []
    generator = Generator()
    completion_ids, logprobs = vllm_generate(SimpleNamespace(vllm_generation=generator), [[1, 2], [3]], 9)
    assert budgets == [9] and generator.max_completion_length == 256
    assert completion_ids == [[7, 7], [7]] and logprobs == [[[-0.5]], [[-0.5]]]


# ---------------------------------------------------------------------------------------------------- transformers


def test_save_checkpoint_writes_the_trainer_checkpoint(tiny_trainer):
    from dynaweb_env.compat.transformers import save_checkpoint

    tiny_trainer.create_optimizer_and_scheduler(num_training_steps=1)
    save_checkpoint(tiny_trainer)
    directory = Path(tiny_trainer.args.output_dir) / f"checkpoint-{tiny_trainer.state.global_step}"
    assert (directory / "trainer_state.json").is_file()
    assert any(directory.glob("*.safetensors"))


def test_cache_layer_internals_the_growing_cache_uses_exist():
    from transformers.cache_utils import Cache, DynamicLayer

    from dynaweb_env.compat.transformers import require_cache_layer_api

    require_cache_layer_api()
    assert "layer_class_to_replicate" in inspect.signature(Cache.__init__).parameters
    for name in ("lazy_initialization", "update", "get_seq_length", "crop", "batch_select_indices"):
        assert callable(getattr(DynamicLayer, name)), name


# ---------------------------------------------------------------------------------------------------- warnings


def _trigger_library_warnings(output_dir: Path) -> None:
    """What gives each silenced warning, with the real libraries: TRL's configs and a model's old property name."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, SFTConfig

    from dynaweb_env.models import resolve_model

    SFTConfig(output_dir=str(output_dir), use_cpu=True, bf16=False)
    GRPOConfig(output_dir=str(output_dir), use_cpu=True, bf16=False)
    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny-random"))
    model.gradient_checkpointing_enable()  # as trl.models.utils does around generation
    assert model.is_gradient_checkpointing
    model.gradient_checkpointing_disable()
    assert list(torch.utils.data.DataLoader([1, 2], pin_memory=True))  # the Trainer's data loader on its defaults


def test_library_warnings_are_silenced_and_still_shown_on_request(tmp_path):
    """Each silenced warning is one the installed libraries still give (``-W`` shows it); by default none shows."""
    import warnings

    import torch

    from dynaweb_env.compat.library_warnings import LIBRARY_WARNINGS, silence_library_warnings

    def silenced(caught: list[warnings.WarningMessage]) -> set[int]:
        return {
            index
            for index, entry in enumerate(LIBRARY_WARNINGS)
            for warning in caught
            if warning.category is entry.category and re.match(entry.message, str(warning.message))
        }

    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()  # Python's defaults have no filter of FutureWarning: the action is "default"
        silence_library_warnings()
        _trigger_library_warnings(tmp_path)
        assert silenced(caught) == set(), [str(warning.message) for warning in caught]
        warnings.simplefilter("default")  # as `-W default` or PYTHONWARNINGS=default, placed before ours
        _trigger_library_warnings(tmp_path)
    # every entry still matches what the installed library warns: no stale filter (torch pins memory without a
    # word where there is an accelerator)
    expected = {i for i, entry in enumerate(LIBRARY_WARNINGS) if "pin_memory" not in entry.message}
    expected |= set() if torch.accelerator.is_available() else set(range(len(LIBRARY_WARNINGS)))
    assert silenced(caught) == expected, [str(warning.message) for warning in caught]


def test_negated_flags_get_their_own_help() -> None:
    """``--no_headless`` says it turns ``--headless`` off (HfArgumentParser copies the positive help), and works."""
    from trl import TrlParser

    from dynaweb_env.compat.transformers import word_negated_flags
    from dynaweb_trainer.evaluate import EvalConfig

    parser = word_negated_flags(TrlParser(EvalConfig, prog="dynaweb-eval"))
    text = " ".join(parser.format_help().split())
    assert "--no_headless, --no-headless Turn --headless off (the same as --headless false)." in text
    assert text.count("Browsers without windows") == 1
    (config,) = parser.parse_args_and_config(args=["--no-headless"])
    assert config.headless is False
