/* repack_avx512_emulated.c - kernels/repack_avx512.c compiled once more
 * with AVX2 only: KVANT_VNNI_EMULATED replaces vpdpbusd by an exact AVX2
 * sequence, tests/zmm_emulated.h the S24_F16 tile's zmm intrinsics, and
 * the entry is named kern_pack_tile_avx512_emulated, so
 * test_repack checks the AVX-512 tile's logic on CPUs without AVX-512
 * (where the AVX-512 tier itself never runs).  Linked into test_repack. */
#define KVANT_VNNI_EMULATED 1
#include "tests/zmm_emulated.h" /* the S24_F16 tile's zmm intrinsics */
#include "kernels/repack_avx512.c"
