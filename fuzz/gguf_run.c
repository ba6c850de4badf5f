/* gguf_run.c - fuzz harness: a GGUF the loader accepts must also run.
 * The input is written to a memory file (memfd) and opened through the
 * public API (kvant_model_open: loader, repacking); when it opens, a
 * sequence of 8 positions runs 3 tokens (ids from the input's first bytes,
 * wrapped into the vocabulary) as one batch and one more alone, logits for
 * all.  Every architecture switch the file can set (biases, q/k norms,
 * fused tensors, experts, windows, soft-caps, partial rotary, F16 or
 * quantized matrices) then reaches the forward pass, which must not read
 * out of bounds, leak or hit undefined behaviour (the logits' values are
 * not checked: mutated weights may well be NaN). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4 || data[0] != 'G') return 0; /* the GGUF loader only (llama2c.c covers the other) */
    int fd = memfd_create("gguf", 0);
    if (fd < 0) abort();
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    kvant_status st = {0};
    kvant_model_params p = {.n_threads = 1};
    kvant_model *m = kvant_model_open(path, &p, &st);
    if (m) {
        kvant_model_info in;
        kvant_model_get_info(m, &in);
        kvant_seq *s = kvant_seq_new(m, 8, &st);
        float *logits = malloc(4 * (size_t)in.vocab_size * sizeof *logits);
        if (s && logits) {
            int32_t t[4];
            for (int i = 0; i < 4; i++) t[i] = (int32_t)(data[(size_t)i % size] % (unsigned)in.vocab_size);
            if (kvant_forward(s, t, 3, logits, true, &st) == KVANT_OK)
                kvant_forward(s, t + 3, 1, logits, false, &st);
        }
        free(logits);
        kvant_seq_free(s);
        kvant_model_free(m);
    }
    close(fd);
    return 0;
}
