"""kernel-workbook: kernels, their references, one timing harness and one records schema."""
