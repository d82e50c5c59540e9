# Two commands from a clean clone: `make report` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KERNEL := kernel-workbook
PLATFORM ?=
# PLUGINS="mod path/to/kernels.py": your kernels timed beside ours (docs/plugins.md)
PLUGINS ?=
export PLUGINS
STAMP := $(VENV)/.installed
PURELIB = $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
# Compiled kernels (flex_attention, torch.compile) persist here between runs: seconds instead of ~30 s.
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor

.PHONY: setup report test test-fast lint lock lock-check check reference lab clean compare

$(PY):
	$(PYTHON) -m venv $(VENV)

# The lock this host installs (locks/, `make lock`): macOS's, a CUDA host's (nvidia-smi), else the
# CPU host's, whose torch is the +cpu wheel: from pip's find-links where set, else PyTorch's index.
LOCK ?= $(if $(filter Darwin,$(shell uname -s)),macos,$(if $(shell command -v nvidia-smi),cuda,cpu))
ifeq ($(origin TORCH_CPU_WHEELS),undefined)
TORCH_CPU_WHEELS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null),https://download.pytorch.org/whl/cpu/torch/)
endif
export TORCH_CPU_WHEELS
LOCKED = --require-hashes --no-deps $(if $(filter cpu,$(1)),--find-links $(TORCH_CPU_WHEELS)) -r locks/$(1).txt
PIP_QUIET := --disable-pip-version-check -q
# uv reads no pip configuration: pip's index, where one is set, is uv's too.
PIP_INDEX = $(or $(PIP_INDEX_URL),$(shell $(PYTHON) -m pip config get global.index-url 2>/dev/null))
# A venv ($(1)) made exactly its lock ($(2)): its pins, each checked against its hashes, nothing
# resolved; what the lock does not hold uninstalled; the lock copied in (run.json and each
# record name it: kernel_lib.locks). A lock that pins uv: pip installs uv from its own lines
# (hashed), then uv the rest (~4 s where pip takes ~40: downloads and unpacking side by side);
# else pip, with $(3): more pip options.
define INSTALL_LOCK
if grep -q '^uv==' locks/$(2).txt; then \
  $(1)/bin/python -m pip install $(PIP_QUIET) --no-compile --require-hashes --no-deps \
    -r <(awk '/^uv==/ {p = 1} p {print} p && !/\\$$/ {exit}' locks/$(2).txt) && \
  $(1)/bin/uv pip install -q --python $(1)/bin/python $(if $(PIP_INDEX),--index-url $(PIP_INDEX)) $(call LOCKED,$(2)); \
else $(1)/bin/python -m pip install $(PIP_QUIET) $(3) $(call LOCKED,$(2)); fi
$(1)/bin/python -m kernel_lib.locks --extras locks/$(2).txt | xargs -r $(1)/bin/python -m pip uninstall -q -y
rm -rf $(1)/kernel-workbook-lock && mkdir $(1)/kernel-workbook-lock && cp locks/$(2).txt $(1)/kernel-workbook-lock/
endef

# Re-runs only when the lock changes. The .pth file puts this checkout's kernel_lib on the venv's
# path for interactive use; `kernel_lib run` and `make lab` put their own checkout first. The
# bytecode: compileall on every core, leaving out the packages' own test suites (a file it cannot
# compile is left to import, as pip leaves it).
$(STAMP): locks/$(LOCK).txt | $(PY)
	$(call INSTALL_LOCK,$(VENV),$(LOCK),--no-compile)
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
	$(PY) -m kernel_lib run $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(ONLY),--only $(ONLY)) $(if $(REPLACE),--replace) $(if $(PLUGINS),-p "plugins=[$$(printf '%s' "$$PLUGINS" | tr -s ' ' ,)]")
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
# lock-check's resolutions (network, little CPU) run beside them too; their lines come at the end.
LOCK_LOG := .cache/locks/check.log
test: lint
	@mkdir -p $(dir $(NBVAL_LOG)) $(dir $(LOCK_LOG)); echo "nbval: the reference notebooks run beside the unit tests (log: $(NBVAL_LOG))"
	@set -m; $(PY) -m kernel_lib check --platform reference > $(NBVAL_LOG) 2>&1 & nbval=$$!; set +m; \
	trap 'kill -- -$$nbval 2>/dev/null' EXIT; \
	$(PY) -m kernel_lib.locks --check > $(LOCK_LOG) 2>&1 & locks=$$!; \
	$(PY) -m pytest tests $(PARALLEL) -k "not rechecked"; unit=$$?; \
	wait $$nbval; checked=$$?; trap - EXIT; \
	if [ $$checked = 0 ]; then tail -n 1 $(NBVAL_LOG); else cat $(NBVAL_LOG); fi; \
	wait $$locks; locked=$$?; cat $(LOCK_LOG); \
	[ $$unit = 0 ] && [ $$checked = 0 ] && [ $$locked = 0 ]
	KERNEL_WORKBOOK_RECHECKED=all $(PY) -m pytest tests/test_cli.py -k rechecked -q

# For iteration (~2 min): lint and the unit tests without the ones marked `slow` (notebook and
# bench executions, compiles; tests/pytest.ini); `make test` stays the whole suite and CI's command.
test-fast: lint
	$(PY) -m pytest tests -m "not slow" $(PARALLEL)

# Every lock resolved again from its input (requirements*.txt) by uv, keeping the versions it
# pins wherever they still satisfy it (UPGRADE=1: the newest allowed); commit locks/ with the input.
lock: setup
	$(PY) -m kernel_lib.locks $(if $(UPGRADE),--upgrade)

# Fails naming the package: a lock stale against its input, two locks pinning a shared package
# apart, or a .venv that differs from its lock.
lock-check: setup
	$(PY) -m kernel_lib.locks --check

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
# locks/xla.txt or locks/tpu.txt (~3 min, ~4 GB download, ~7 GB on disk the first time).
#   make xla-test                                  TPU and fp8 notebooks on XLA:CPU + XLA unit tests (.ci/xla)
#   make xla-report PLATFORM=gcp-tpu-v5e           on a TPU VM: adds torch-xla[tpu] (libtpu), PJRT_DEVICE=TPU
XLA_VENV := .venv-xla
XLA_PY := $(XLA_VENV)/bin/python
XLA_PLATFORM := $(or $(PLATFORM),xla-cpu)
XLA_PJRT ?= $(if $(filter gcp-tpu-%,$(XLA_PLATFORM)),TPU,CPU)
# locks/tpu.txt on a TPU VM (torch-xla's tpu extra: libtpu), else locks/xla.txt
XLA_LOCK := $(if $(filter gcp-tpu-%,$(XLA_PLATFORM)),tpu,xla)
XLA_STAMP := $(XLA_VENV)/.installed-$(XLA_LOCK)

.PHONY: xla-setup xla-test xla-report

$(XLA_PY):
	$(PYTHON) -m venv $(XLA_VENV)
	echo '*' > $(XLA_VENV)/.gitignore

$(XLA_STAMP): locks/$(XLA_LOCK).txt | $(XLA_PY)
	rm -f $(XLA_VENV)/.installed-*
	$(call INSTALL_LOCK,$(XLA_VENV),$(XLA_LOCK))
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

# What .venv holds already (at the same versions: make lock-check) pip leaves there.
$(CLOUD_STAMP): locks/cloud.txt $(STAMP) | $(CLOUD_PY)
	echo "import site; site.addsitedir('$$($(PY) -c '$(SITE_PACKAGES)')')" \
	  > "$$($(CLOUD_PY) -c '$(SITE_PACKAGES)')/kernel_workbook_venv.pth"
	$(CLOUD_PY) -m pip install $(PIP_QUIET) $(call LOCKED,cloud)
	touch $@

cloud-setup: $(CLOUD_STAMP)

cloud-test: cloud-setup
	$(CLOUD_PY) -m pytest -q tests/cloud

include device.mk
