# Two commands from a clean clone: `make report` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KERNEL := kernel-workbook
PLATFORM ?=
STAMP := $(VENV)/.installed
PURELIB = $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
# Compiled kernels (flex_attention, torch.compile) persist here between runs: seconds instead of ~30 s.
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor

.PHONY: setup report test test-fast lint check reference lab clean compare

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-runs only when requirements.txt changes. The .pth file puts this checkout's kernel_lib on the
# venv's path for interactive use; `kernel_lib run` and `make lab` put their own checkout first.
# pip writes bytecode one file at a time; compileall on every core, leaving out the packages' own
# test suites (a file it cannot compile is left to import, as pip leaves it).
$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --disable-pip-version-check -q --no-compile -r requirements.txt
	$(PY) -m compileall -qq -j 0 -x '/site-packages/.+/tests/' "$$($(PURELIB))" || true
	echo "$(CURDIR)" > "$$($(PURELIB))/kernel_workbook.pth"
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) \
	  --display-name "Python ($(KERNEL))"
	touch $@

setup: $(STAMP)

# TPU platforms need torch_xla, which lives in its own environment (see the XLA block below).
ifneq ($(filter gcp-tpu-% xla-cpu,$(PLATFORM)),)
report: xla-report
else
report: setup
	$(PY) -m kernel_lib run $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(ONLY),--only $(ONLY)) $(if $(REPLACE),--replace)
endif

# Two revisions compared, their runs interleaved (docs/revisions.md); B=WORKTREE: the working tree.
ifneq ($(filter compare,$(MAKECMDGOALS)),)
ifeq ($(and $(A),$(B)),)
$(error usage: make compare A=REV B=REV [RUNS=N] [ONLY=nb,...] [PLATFORM=P])
endif
endif
compare: setup
	$(PY) -m kernel_lib ab "$(A)" "$(B)" $(if $(RUNS),--runs $(RUNS)) $(if $(ONLY),--only $(ONLY)) $(if $(PLATFORM),--platform $(PLATFORM))

# The tests on every core (pytest-xdist; a file's tests stay together, so its fixtures run once),
# the files handed out in the order tests/conftest.py gives them.
PARALLEL := -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

# nbval beside the unit tests: it executes every notebook at CI sizes (the reference's parameters)
# and saves their records, which the `rechecked` tests then read (tests/test_cli.py) instead of
# running the suites again. Side by side they keep both cores busy: flex_attention's notebook alone
# outlasts the other notebooks. Its output goes to NBVAL_LOG, shown where it fails; a stopped
# `make test` stops it too (its own process group).
NBVAL_LOG := .cache/nbval/reference.log
test: lint
	@mkdir -p $(dir $(NBVAL_LOG)); echo "nbval: the reference notebooks run beside the unit tests (log: $(NBVAL_LOG))"
	@set -m; $(PY) -m kernel_lib check --platform reference > $(NBVAL_LOG) 2>&1 & nbval=$$!; set +m; \
	trap 'kill -- -$$nbval 2>/dev/null' EXIT; \
	$(PY) -m pytest tests $(PARALLEL) -k "not rechecked"; unit=$$?; \
	wait $$nbval; checked=$$?; trap - EXIT; \
	if [ $$checked = 0 ]; then tail -n 1 $(NBVAL_LOG); else cat $(NBVAL_LOG); fi; \
	[ $$unit = 0 ] && [ $$checked = 0 ]
	KERNEL_WORKBOOK_RECHECKED=all $(PY) -m pytest tests/test_cli.py -k rechecked -q

# For iteration (~2 min): lint and the unit tests without the ones marked `slow` (notebook and
# bench executions, compiles; tests/pytest.ini); `make test` stays the whole suite and CI's command.
test-fast: lint
	$(PY) -m pytest tests -m "not slow" $(PARALLEL)

# ruff settings live in pyproject.toml.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

check: setup
	$(PY) -m kernel_lib check $(if $(PLATFORM),--platform $(PLATFORM))

reference: setup
	$(PY) -m kernel_lib run --platform ci --out outputs/reference --nbval-reference

# JupyterLab refuses to start as root unless told (containers, cloud VMs often run as root).
# Its kernels import this checkout's kernel_lib, whichever checkout made the venv.
lab: setup
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(VENV)/bin/jupyter lab \
	  --notebook-dir notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

clean:
	rm -rf $(VENV) .cache

# ---------------------------------------------------------------------------------------------------
# XLA / TPU (backend_tpu): torch_xla X.Y needs torch X.Y, so it gets its own venv from
# requirements-tpu.txt (~3 min, ~4 GB download, ~7 GB on disk the first time).
#   make xla-test                                  TPU and fp8 notebooks on XLA:CPU + XLA unit tests (.ci/xla)
#   make xla-report PLATFORM=gcp-tpu-v5e           on a TPU VM: adds torch-xla[tpu] (libtpu), PJRT_DEVICE=TPU
XLA_VENV := .venv-xla
XLA_PY := $(XLA_VENV)/bin/python
XLA_PLATFORM := $(or $(PLATFORM),xla-cpu)
XLA_EXTRA ?= $(if $(filter gcp-tpu-%,$(XLA_PLATFORM)),tpu)
XLA_PJRT ?= $(if $(filter gcp-tpu-%,$(XLA_PLATFORM)),TPU,CPU)
XLA_VERSION := $(shell sed -n 's/^torch-xla==\([0-9.]*\).*/\1/p' requirements-tpu.txt)
XLA_STAMP := $(XLA_VENV)/.installed$(if $(XLA_EXTRA),-$(XLA_EXTRA))

.PHONY: xla-setup xla-test xla-report

$(XLA_PY):
	$(PYTHON) -m venv $(XLA_VENV)
	echo '*' > $(XLA_VENV)/.gitignore

$(XLA_STAMP): requirements-tpu.txt | $(XLA_PY)
	$(XLA_PY) -m pip install --disable-pip-version-check -q -r requirements-tpu.txt \
	  $(if $(XLA_EXTRA),"torch-xla[$(XLA_EXTRA)]==$(XLA_VERSION)")
	$(XLA_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	  | xargs -I{} sh -c 'echo "$(CURDIR)" > {}/kernel_workbook.pth'
	$(XLA_PY) -m ipykernel install --sys-prefix --name $(KERNEL) \
	  --display-name "Python ($(KERNEL), torch_xla)"
	touch $@

xla-setup: $(XLA_STAMP)

# The report goes to .cache/ (a CI check, not a committed report); `make xla-report` writes outputs/.
xla-test: xla-setup
	PJRT_DEVICE=CPU $(XLA_PY) -m pytest -q tests/backends
	PJRT_DEVICE=CPU $(XLA_PY) -m kernel_lib run --platform xla-cpu --out .cache/xla-cpu

xla-report: xla-setup
	PJRT_DEVICE=$(XLA_PJRT) $(XLA_PY) -m kernel_lib run --platform $(XLA_PLATFORM) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(ONLY),--only $(ONLY))

# ---------------------------------------------------------------------------------------------------
# Cloud fan-out (kernel_lib/cloud, SkyPilot): SkyPilot and its cloud SDKs get their own venv,
# .venv-cloud, layered over .venv (a .pth file adds .venv's packages after its own), so
# `python -m kernel_lib cloud` has both without installing torch twice (~1 min, ~0.8 GB).
#   make cloud-setup    then: .venv-cloud/bin/sky check; .venv-cloud/bin/python -m kernel_lib cloud ...
#   make cloud-test     the offline tests of tests/cloud (task files, optimizer, run + collect) (.ci/cloud)
CLOUD_VENV := .venv-cloud
CLOUD_PY := $(CLOUD_VENV)/bin/python
CLOUD_STAMP := $(CLOUD_VENV)/.installed
SITE_PACKAGES := import site; print(site.getsitepackages()[0])

.PHONY: cloud-setup cloud-test

$(CLOUD_PY):
	$(PYTHON) -m venv $(CLOUD_VENV)
	echo '*' > $(CLOUD_VENV)/.gitignore

$(CLOUD_STAMP): requirements-cloud.txt $(STAMP) | $(CLOUD_PY)
	echo "import site; site.addsitedir('$$($(PY) -c '$(SITE_PACKAGES)')')" \
	  > "$$($(CLOUD_PY) -c '$(SITE_PACKAGES)')/kernel_workbook_venv.pth"
	$(CLOUD_PY) -m pip install --disable-pip-version-check -q -r requirements-cloud.txt
	touch $@

cloud-setup: $(CLOUD_STAMP)

cloud-test: cloud-setup
	$(CLOUD_PY) -m pytest -q tests/cloud

include device.mk
