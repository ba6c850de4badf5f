/* repack_f16_avx512_emulated.c - kernels/repack_f16_avx512.c compiled once
 * more with AVX2 only, its zmm intrinsics emulated exactly
 * (tests/zmm_emulated.h), so test_repack_f16 checks the 512-bit F16 and
 * BF16 tiles' logic on any CPU with AVX2, not only on AVX-512 ones.  The
 * entries are renamed; BF16's runs under FTZ and DAZ, the flushes the
 * instruction makes itself.  Linked into test_repack_f16. */
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "tests/zmm_emulated.h"

#define kern_pack_f16_tile_avx512 kern_pack_f16_tile_avx512_emulated
#define kern_pack_bf16_tile_avx512 kern_pack_bf16_tile_avx512_hardware_only
kern_pack_f16_tile_fn kern_pack_f16_tile_avx512(void);
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512(void); /* unused: AVX512_BF16 only */
#include "kernels/repack_f16_avx512.c"
#undef kern_pack_f16_tile_avx512
#undef kern_pack_bf16_tile_avx512

kern_pack_f16_tile_fn kern_pack_f16_tile_avx512_emulated(void);
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512_emulated(void);
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512_halved_emulated(void);

static void tile_bf16_flushing(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w, const void *a,
                               size_t ba) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
    tile_bf16(K, G, C, y, ldy, w, a, ba);
    _mm_setcsr(csr);
}
/* the 4 groups x 12 rows blocks of Zen 4 */
static void tile_bf16_halved_flushing(int64_t K, int G, int C, float *y, size_t ldy, const uint16_t *w,
                                      const void *a, size_t ba) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    tile_bf16_halved(K, G, C, y, ldy, w, a, ba);
    _mm_setcsr(csr);
}
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512_emulated(void) { return tile_bf16_flushing; }
kern_pack_f16_tile_fn kern_pack_bf16_tile_avx512_halved_emulated(void) { return tile_bf16_halved_flushing; }
