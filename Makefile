# Two entry points: `make demo` (the main job on embedded defaults) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install demo test lint typecheck browser slurm prometheus bench clean

# torch first, pinned: the CPU build is served here; an unpinned torch pulls GBs of CUDA wheels.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[timer,platform,embedded,dev]'
	touch $(STAMP)

install: $(STAMP)

# Headless Chromium for the dashboard's browser tests (Debian packages; needs root to install).
browser:
	@if ! command -v chromedriver >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	      || echo "warning: could not install chromium; browser tests will be skipped"; \
	  else echo "note: chromium-driver missing and not root; browser tests will be skipped"; fi; \
	fi

# Slurm and munge for the Slurm backend's tests (tests/support/slurm_cluster.py starts its own daemons; needs root).
slurm:
	@if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null) \
	      || echo "warning: could not install slurm-wlm and munge; slurm tests will be skipped"; \
	  else echo "note: slurm-wlm or munge missing and not root; slurm tests will be skipped"; fi; \
	fi

# Prometheus and promtool for the metrics tests (Debian package; needs root to install).
prometheus:
	@if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
	      || echo "warning: could not install prometheus; the Prometheus tests will be skipped"; \
	  else echo "note: prometheus missing and not root; the Prometheus tests will be skipped"; fi; \
	fi

demo: install
	$(VENV)/bin/vigil demo

# ruff (style, and bare `import timer`-style names) and import-linter (the layers in pyproject.toml).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

typecheck: install
	$(VENV)/bin/mypy

# Two tiers, each in its own pytest process: the quick tests, then the slow real-job ones (marker `slow`) in a
# fresh interpreter, so nothing a thousand quick tests leave in one process reaches the real jobs. Both tiers run;
# either failing fails the target. PYTEST_ARGS given: one run with them instead. The `scale` runs (minutes each)
# only when asked: PYTEST_ARGS="-m scale".
test: install browser slurm prometheus lint typecheck
ifeq ($(strip $(PYTEST_ARGS)),)
	status=0; $(PY) -m pytest -m "not slow and not scale" || status=$$?; \
	  $(PY) -m pytest -m "slow and not scale" || status=$$?; exit $$status
else
	$(PY) -m pytest $(PYTEST_ARGS)
endif

bench: install
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
