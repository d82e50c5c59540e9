# ---------------------------------------------------------------------------------------------------
# A GPU host whose image holds PyTorch (Python 3.12) and no package index: the wheels it lacks
# travel with the checkout, and `python3 -m kernel_lib.device_run` there installs them offline,
# runs a preflight, the quick plan within a time budget and archives the report (kernel_lib/device_run).
#   make device-wheels     the wheels locks/device.txt pins, for CPython 3.12 manylinux
#                          x86_64, into .whl/device/ (~16 MB, 44 files): bring that folder along
#   make device-dry-run    the whole recipe here on the CPU at parameters/ci.yaml, nothing
#                          installed: the wheels checked to install offline on 3.12 (~3-5 min)
# Included by the Makefile (uses its PY, STAMP and the TORCHINDUCTOR_CACHE_DIR it exports).
DEVICE_WHEELS := .whl/device
DEVICE_STAMP := $(DEVICE_WHEELS)/.downloaded
# Every topic once, at CI's sizes with the quick plans' choice of sections (one flex pattern, no
# attention-gym patterns, their MoE strategies, page size...): from a clean clone, whose compile
# caches are cold, CI's full flex notebook alone compiles for minutes on a CPU. The CPU's
# backend notebook stands in for the GPU's.
DEVICE_DRY_RUN_ONLY := backend_cpu,fp8,flex_attention,moe
DEVICE_DRY_RUN_PARAMS := 'attn_patterns=[causal]' 'attn_causal_dtypes=[float32]' \
  'attn_windows=[16]' 'attn_seq_lens=[128]' 'attn_gym_patterns=[]' \
  'attn_gym_kernels=[activation]' 'attn_activations=[relu]' 'attn_decode_kv_lens=[300]' \
  attn_page_size=128 'moe_strategies=[loop,sorted_grouped,padded,triton]' moe_backward=false \
  'moe_layer_types=[standard]' 'moe_imbalance=[0.0]' 'moe_sweep_tokens=[128]' \
  'moe_sweep_experts=[8]' 'moe_sweep_top_k=[2]' 'moe_sweep_strategies=[sorted_grouped]' \
  'fp8_quant_granularities=[tensorwise]' fp8_train_seeds=1 'moe_presets=[mixtral-8x7b]' \
  'fp8_train_recipes=[tensorwise_dynamic]' 'allocators=[system]' probe_compile=false

.PHONY: device-wheels device-dry-run

# The same tags as kernel_lib/device_run/wheels.py HOST_TAGS. A fresh folder each time: two
# versions of one package would stop the install on the host. Each wheel is checked against the
# lock's hashes.
$(DEVICE_STAMP): locks/device.txt | $(PY)
	rm -rf $(DEVICE_WHEELS)
	$(PY) -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
	  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d $(DEVICE_WHEELS) -r locks/device.txt
	touch $@

device-wheels: $(DEVICE_STAMP)

device-dry-run: setup device-wheels
	$(PY) -m kernel_lib.device_run --platform ci --only $(DEVICE_DRY_RUN_ONLY) \
	  --wheels $(DEVICE_WHEELS) --dry-run $(addprefix -p ,$(DEVICE_DRY_RUN_PARAMS))
