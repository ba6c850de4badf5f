/* w8a8.c - the stored W8A8 type's row functions, plain C (kernels/w8a8.h). */
#include <stdlib.h>

#include "kernels/int8.h"
#include "kernels/w8a8.h"

size_t kern_w8a8_row_bytes(int64_t n) { return n < 0 || n > KERN_W8A8_MAX_K ? 0 : 4 + (size_t)n; }

void kern_w8a8_dequant_ref(const void *x, float *y, int64_t n) {
    float s;
    memcpy(&s, x, 4);
    const int8_t *q = (const int8_t *)x + 4;
    for (int64_t i = 0; i < n; i++) y[i] = (float)q[i] * s;
}

void kern_w8a8_quant_ref(const float *x, void *y, int64_t n) {
    float s;
    kern_i8_quant_rows(x, 1, n, n, (int8_t *)y + 4, &s, NULL);
    memcpy(y, &s, 4);
}

void kern_w8a8_vec_dot_ref(int64_t n, float *s, const void *x, const void *y) {
    int8_t *qx = malloc((size_t)(n > 0 ? n : 1));
    float sx, sw;
    CORE_ASSERT(qx && n <= KERN_W8A8_MAX_K);
    kern_i8_quant_rows(y, 1, n, n, qx, &sx, NULL);
    memcpy(&sw, x, 4);
    const int8_t *qw = (const int8_t *)x + 4;
    int32_t acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (int32_t)qw[i] * qx[i];
    free(qx);
    *s = (float)acc * (sx * sw);
}
