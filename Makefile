# Two commands from a clean clone: `make report` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KERNEL := kernel-workbook
PLATFORM ?=
STAMP := $(VENV)/.installed
# Compiled kernels (flex_attention, torch.compile) persist here between runs: seconds instead of ~30 s.
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor

.PHONY: setup report test check reference lab clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-runs only when requirements.txt changes. The .pth file puts kernel_lib on the venv's path.
$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	$(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	  | xargs -I{} sh -c 'echo "$(CURDIR)" > {}/kernel_workbook.pth'
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) \
	  --display-name "Python ($(KERNEL))" --env TORCHINDUCTOR_CACHE_DIR "$(TORCHINDUCTOR_CACHE_DIR)"
	touch $@

setup: $(STAMP)

report: setup
	$(PY) -m kernel_lib run $(if $(PLATFORM),--platform $(PLATFORM))

test: setup
	$(PY) -m pytest tests
	$(PY) -m kernel_lib check --platform reference

check: setup
	$(PY) -m kernel_lib check $(if $(PLATFORM),--platform $(PLATFORM))

reference: setup
	$(PY) -m kernel_lib run --platform ci --out outputs/reference

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir notebooks

clean:
	rm -rf $(VENV) .cache
