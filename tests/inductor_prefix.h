// Inductor's precompiled header for the tests (tests/conftest.py): its own prefix and the headers
// its CPU flex-attention template adds, which g++ would otherwise parse again for every kernel.
#include <torch/csrc/inductor/cpp_prefix.h>
#include <ATen/native/cpu/utils.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/Context.h>
