/* ptq_avx2.c - AVX2 kernels of the PTQ types (kernels/ptq.h). */
#include <immintrin.h>

#include "kernels/ptq.h"
#include "kernels/quants.h"

void kern_ptq_avx2_install(kern_type_ops *ops) { (void)ops; }
