/* data.c - the train/validation split and random windows. */
#include "train/train.h"

size_t train_split_offset(const char *text, size_t len) {
    size_t off = len - len / 10;
    while (off > 0 && off < len && text[off - 1] != '\n') off++; /* to a line start */
    return off;
}

static uint64_t xs(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void train_data_batch(train_data *d, int B, int T, int32_t *inputs, int32_t *targets) {
    CORE_ASSERT(d->n_train > T);
    for (int b = 0; b < B; b++) {
        const int64_t start = (int64_t)(xs(&d->rng) % (uint64_t)(d->n_train - T));
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = d->train[start + t];
            targets[b * T + t] = d->train[start + t + 1];
        }
    }
}
