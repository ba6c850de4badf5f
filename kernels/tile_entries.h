/* kernels/tile_entries.h - private to the per-ISA vec_dot files.
 *
 * Given that file's tile functions
 *     tile_f32(n, R, C, y, ldy, x, bx, a, ba)
 *     tile_q(K, n, R, C, y, ldy, x, bx, a, ba)   K in K_Q4_0 .. K_Q8_0
 * (an R x C tile of dot products, R <= 4, C <= TC) and TC, this defines
 * for every weight type the static vec_dot_<type> (the 1x1 tile) and
 * gemm_<type> (the kern_gemm_fn contract of kernels/types.h).  Include it
 * after those definitions; the ISA-specific work stays in the tiles. */
/* The entry points of one weight type: vec_dot = the 1x1 tile; gemm runs
 * columns TC at a time through tiles specialised for 1..4 rows. */
#define TILE_ENTRIES(name, TILE)                                                                          \
    static void vec_dot_##name(int64_t n, float *s, const void *x, const void *y) {                      \
        TILE(n, 1, 1, s, 1, x, 0, y, 0);                                                                 \
    }                                                                                                     \
    static void gemm_##name(int64_t n, int nr, int nc, float *y, size_t ldy, const void *x, size_t bx,   \
                            const void *a, size_t ba) {                                                   \
        for (int c0 = 0; c0 < nc; c0 += TC) {                                                            \
            const uint8_t *ac = (const uint8_t *)a + (size_t)c0 * ba;                                    \
            float *yc = y + (size_t)c0 * ldy;                                                            \
            switch ((nc - c0 >= 2 ? 10 : 0) + nr) {                                                      \
            case 1: TILE(n, 1, 1, yc, ldy, x, bx, ac, ba); break;                                        \
            case 2: TILE(n, 2, 1, yc, ldy, x, bx, ac, ba); break;                                        \
            case 3: TILE(n, 3, 1, yc, ldy, x, bx, ac, ba); break;                                        \
            case 4: TILE(n, 4, 1, yc, ldy, x, bx, ac, ba); break;                                        \
            case 11: TILE(n, 1, 2, yc, ldy, x, bx, ac, ba); break;                                       \
            case 12: TILE(n, 2, 2, yc, ldy, x, bx, ac, ba); break;                                       \
            case 13: TILE(n, 3, 2, yc, ldy, x, bx, ac, ba); break;                                       \
            default: TILE(n, 4, 2, yc, ldy, x, bx, ac, ba); break;                                       \
            }                                                                                             \
        }                                                                                                 \
    }

#define T_F32(n, R, C, y, ldy, x, bx, a, ba) tile_f32(n, R, C, y, ldy, x, bx, a, ba)
#define T_Q4_0(n, R, C, y, ldy, x, bx, a, ba) tile_q(K_Q4_0, n, R, C, y, ldy, x, bx, a, ba)
#define T_Q4_1(n, R, C, y, ldy, x, bx, a, ba) tile_q(K_Q4_1, n, R, C, y, ldy, x, bx, a, ba)
#define T_Q5_0(n, R, C, y, ldy, x, bx, a, ba) tile_q(K_Q5_0, n, R, C, y, ldy, x, bx, a, ba)
#define T_Q5_1(n, R, C, y, ldy, x, bx, a, ba) tile_q(K_Q5_1, n, R, C, y, ldy, x, bx, a, ba)
#define T_Q8_0(n, R, C, y, ldy, x, bx, a, ba) tile_q(K_Q8_0, n, R, C, y, ldy, x, bx, a, ba)
/* x: Q4_0 (x = (q - 8) d), Q4_1 (x = q d + m), Q5_0 (x = (q - 16) d), Q5_1
 * (x = q d + m) or Q8_0 rows; y: Q8_0 rows (Q8_1, s = d * sum q, for the _1 types) */
TILE_ENTRIES(f32, T_F32)
TILE_ENTRIES(q4_0_q8_0, T_Q4_0)
TILE_ENTRIES(q4_1_q8_1, T_Q4_1)
TILE_ENTRIES(q5_0_q8_0, T_Q5_0)
TILE_ENTRIES(q5_1_q8_1, T_Q5_1)
TILE_ENTRIES(q8_0_q8_0, T_Q8_0)
