/* kernels/repack_tile.h - private to the per-ISA packed tiles
 * (repack_avx2.c, repack_avx512.c): what both read the same way.  Include
 * it only from files compiled with AVX2 (or more) enabled. */
#ifndef KVANT_KERNELS_REPACK_TILE_H
#define KVANT_KERNELS_REPACK_TILE_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "kernels/quants.h"
#include "kernels/repack.h"

#define AI static inline __attribute__((always_inline))

/* 4 activation bytes broadcast to every 32-bit lane */
AI __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Decode (one activation row) streams the weights once from memory, and the
 * first load of each block waited on it (perf: ~40% of the tile's samples).
 * Prefetching PF_DIST bytes ahead keeps enough lines in flight; prefetches
 * never fault, so running past the end of the matrix is harmless. */
#ifndef PF_DIST
#define PF_DIST 2048
#endif
AI void prefetch_block(const uint8_t *w, size_t xb, const int C) {
    if (C != 1) return; /* prefill: the group is reused across rows, already cached */
    for (size_t off = 0; off < xb; off += 64) _mm_prefetch((const char *)(w + PF_DIST + off), _MM_HINT_T0);
}

/* activation row c's Q8_0 qs of block b; its Q8_K block b (a, ba: the tile's) */
#define AQS(c, b) (a + (size_t)(c) * ba + (size_t)(b) * sizeof(block_q8_0) + offsetof(block_q8_0, qs))
#define AK(c, b) ((const block_q8_K *)(a + (size_t)(c) * ba) + (b))

/* Q4_0, Q4_1, Q5_0, Q5_1 (the packed layouts of repack.h) */
enum { L_Q4_0, L_Q4_1, L_Q5_0, L_Q5_1 };
typedef struct {
    bool min, five; /* a block minimum (Q4_1, Q5_1; Q8_1 activations); a fifth bit */
    int off;        /* Q4_0, Q5_0: the offset of q (8, 16) */
    size_t xb, qso, qho;  /* packed block bytes; offsets of qs and qh */
    size_t ab, aqo;       /* activation block bytes; offset of its qs */
} legacy_geo;
AI legacy_geo legacy_geo_of(const int kind) {
    const bool min = kind == L_Q4_1 || kind == L_Q5_1;
    return (legacy_geo){.min = min,
                        .five = kind == L_Q5_0 || kind == L_Q5_1,
                        .off = kind == L_Q4_0 ? 8 : 16,
                        .xb = kind == L_Q4_0 ? 144 : kind == L_Q4_1 ? 160 : kind == L_Q5_0 ? 176 : 192,
                        .qso = kind == L_Q4_0 ? 16 : kind == L_Q4_1 ? 32 : kind == L_Q5_0 ? 48 : 64,
                        .qho = kind == L_Q5_0 ? 16 : 32,
                        .ab = min ? sizeof(block_q8_1) : sizeof(block_q8_0),
                        .aqo = min ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs)};
}

/* The kern_pack_tile_fn of a type: C (1..4) becomes a compile-time constant
 * CC inside CALL, so each width gets its own register-allocated copy. */
#define PACK_ENTRY(name, CALL)                                                                                  \
    static void name(int64_t nb, int C, float *y, size_t ldy, const uint8_t *w, const uint8_t *a, size_t ba,   \
                     const float *ad, const int32_t *as, size_t bn) {                                           \
        (void)as;                                                                                               \
        switch (C) {                                                                                            \
        case 1: { enum { CC = 1 }; CALL; } break;                                                               \
        case 2: { enum { CC = 2 }; CALL; } break;                                                               \
        case 3: { enum { CC = 3 }; CALL; } break;                                                               \
        default: { enum { CC = 4 }; CALL; } break;                                                              \
        }                                                                                                       \
    }

#endif
