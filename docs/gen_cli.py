"""Write ``docs/cli.md``, the command-line reference, from the config dataclasses' help.

Command (from the repository root; ``tests/test_docs.py`` checks that the file is current)::

    python docs/gen_cli.py > docs/cli.md

A command whose options are a dataclass (parsed by TRL's ``TrlParser``) gets a table of the fields DynaWeb
declares: the flag, its default and its help. Options inherited from TRL's and transformers' configs are left to
their own documentation, except those a command's default preset sets. A command that runs a preset when given no
flag (``dynaweb-train``: ``cpu-small``) gets a column of the preset's values, which are what a user gets, and a
row for each inherited option the preset sets. A command parsed by ``argparse`` gets its ``--help`` text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (console script, subcommand of ``dynaweb``, "module:Dataclass" or "module:function" of an argparse CLI, note).
COMMANDS: list[tuple[str, str, str, str]] = [
    (
        "dynaweb-train",
        "train",
        "dynaweb_trainer.config:GSPOConfig",
        "Also takes every option of TRL's `GRPOConfig` and transformers' `TrainingArguments`, `--preset NAME` "
        "and `--config run.yaml`. A run reads a preset (`cpu-small`, the default, or another of "
        "`dynaweb_trainer/presets/`), then `--config`, then flags: the `cpu-small` column is what `dynaweb train` "
        "runs with no flag (**bold**: the preset's value, not the class default), and the last rows are options of "
        "TRL and transformers that the preset sets.",
    ),
    (
        "dynaweb-sft",
        "sft",
        "dynaweb_trainer.sft:PolicySFTConfig",
        "Also takes every option of TRL's `SFTConfig`; `--resume` continues from the last complete checkpoint.",
    ),
    (
        "dynaweb-train-wm",
        "train-wm",
        "dynaweb_trainer.world_model_sft:WorldModelSFTConfig",
        "Also takes every option of TRL's `SFTConfig`. `dynaweb train-judge` is this command with `--examples judge`.",
    ),
    ("dynaweb-eval", "eval", "dynaweb_trainer.evaluate:EvalConfig", ""),
    ("dynaweb-collect", "collect", "dynaweb_trainer.collect:CollectConfig", ""),
    ("dynaweb-eval-wm", "eval-wm", "dynaweb_trainer.evaluate_world_model:WorldModelEvalConfig", ""),
    ("dynaweb-dream", "dream", "dynaweb_trainer.dream_demo:DreamDemoConfig", ""),
    ("dynaweb-build-data", "build-data", "dynaweb_trainer.build_data:cli", ""),
    ("dynaweb-dream-judge-data", "dream-judge-data", "dynaweb_trainer.dreamed_judge_data:cli", ""),
    ("dynaweb-average-adapters", "average-adapters", "dynaweb_trainer.adapter_average:cli", ""),
    ("dynaweb-serve", "serve", "dynaweb_env.integrations.openenv:main", ""),
]


#: Commands that run a named preset when given no flag: console script -> preset (``dynaweb_trainer/presets/``).
DEFAULT_PRESETS: dict[str, str] = {"dynaweb-train": "cpu-small"}


def _preset_values(name: str) -> dict[str, Any]:
    """The fields a preset's YAML sets, as ``dynaweb-train`` reads them (``env:`` names the environment)."""
    import yaml

    from dynaweb_trainer.config import preset_path

    values = yaml.safe_load(preset_path(name).read_text()) or {}
    if isinstance(values.get("env"), str):
        values["environment"] = values.pop("env")
    return values


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _own_fields(cls: type) -> list[dataclasses.Field]:
    """The fields declared by DynaWeb's classes in ``cls``'s hierarchy (not TRL's or transformers')."""
    ours = {
        name
        for klass in cls.__mro__
        if klass.__module__.startswith("dynaweb")
        for name in vars(klass).get("__annotations__", {})
    }
    return [f for f in dataclasses.fields(cls) if f.name in ours and f.init]


def _default_value(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _format(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "required"
    return f"`{value!r}`" if value not in ("", None) else ("`None`" if value is None else '`""`')


def _default(f: dataclasses.Field) -> str:
    return _format(_default_value(f))


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _first_sentence(text: str) -> str:
    text = " ".join(str(text).split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _dataclass_section(cls: type, preset: str | None = None) -> list[str]:
    if preset is None:
        lines = ["| flag | default | what it sets |", "| --- | --- | --- |"]
        for f in _own_fields(cls):
            if f.metadata.get("help") is None and f.name.startswith("_"):
                continue
            lines.append(f"| `--{f.name}` | {_cell(_default(f))} | {_cell(f.metadata.get('help', ''))} |")
        return lines
    values = _preset_values(preset)

    def row(f: dataclasses.Field, help_text: str) -> str:
        default = _default_value(f)
        value = values.get(f.name, default)
        shown = _format(value) if f.name not in values or value == default else f"**{_format(value)}**"
        return f"| `--{f.name}` | {_cell(_format(default))} | {_cell(shown)} | {_cell(help_text)} |"

    lines = [f"| flag | default | `{preset}` | what it sets |", "| --- | --- | --- | --- |"]
    own = _own_fields(cls)
    for f in own:
        if f.metadata.get("help") is None and f.name.startswith("_"):
            continue
        lines.append(row(f, f.metadata.get("help", "")))
    inherited = {f.name: f for f in dataclasses.fields(cls) if f.name in values and f not in own}
    for name in values:  # in the preset's order
        if name in inherited:
            help_text = _first_sentence(inherited[name].metadata.get("help", ""))
            lines.append(row(inherited[name], f"(TRL / transformers) {help_text}"))
    return lines


def _argparse_section(script: str, target: str) -> list[str]:
    out = io.StringIO()
    os.environ["COLUMNS"] = "100"  # argparse wraps its help to the terminal's width: the file must not depend on it
    argv, sys.argv = sys.argv, [script, "--help"]
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            _load(target)()
    finally:
        sys.argv = argv
    return ["```text", out.getvalue().rstrip(), "```"]


def render() -> str:
    """The text of ``docs/cli.md``."""
    lines = [
        "# Command-line reference",
        "",
        "Generated by `python docs/gen_cli.py > docs/cli.md` from the config dataclasses' help (do not edit).",
        "Every command is a `dynaweb` subcommand and a console script of its own: `dynaweb train ...` runs",
        "`dynaweb-train ...`. Flags are written with underscores here; dashes work too (`--expert-frac`).",
        "Commands parsed by TRL's `TrlParser` also take `--config run.yaml`, whose keys are the flags' names.",
        "",
    ]
    for script, sub, target, note in COMMANDS:
        lines += [f"## `{script}` (`dynaweb {sub}`)", ""]
        obj = _load(target)
        doc = (obj.__doc__ or "").strip().split("\n\n")[0] if dataclasses.is_dataclass(obj) else ""
        if doc:
            lines += [re.sub(r"\[`~?(?:\w+\.)*(\w+)`\]", r"`\1`", " ".join(doc.split())), ""]
        if note:
            lines += [note, ""]
        if dataclasses.is_dataclass(obj):
            section = _dataclass_section(obj, DEFAULT_PRESETS.get(script))
        else:
            section = _argparse_section(script, target)
        lines += [*section, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
