/* llama2c.c - fuzz harness: the llama2.c checkpoint reader
 * (model/load_llama2c.c) and the tokenizer.bin reader it calls
 * (tok/load.c tok_from_llama2c).  Both read from paths, so the input is
 * split and written to two memory files (memfd, /proc/self/fd/N):
 *   u32 little-endian N | N bytes: the checkpoint | the rest: tokenizer.bin
 * (an N past the end gives the whole input to the checkpoint and an empty
 * tokenizer).  When both load, a few tokens are encoded and decoded.
 * Inputs must be refused with a status, never read out of bounds, leak,
 * or allocate past the limits. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a memory file holding data[0..n); its path in path; -1 on failure */
static int mem_file(const char *name, const uint8_t *data, size_t n, char *path, size_t cap) {
    int fd = memfd_create(name, 0);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, data + done, n - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    data += 4, size -= 4;
    if (n > size) n = (uint32_t)size;
    char ck_path[64], tok_path[64];
    int ck = mem_file("ckpt", data, n, ck_path, sizeof ck_path);
    int tk = mem_file("tok", data + n, size - n, tok_path, sizeof tok_path);
    if (ck < 0 || tk < 0) abort(); /* not the input's fault */

    kvant_status st = {0};
    model *m = calloc(1, sizeof *m);
    if (!m) abort();
    if (model_load_llama2c(m, ck_path, tok_path, &st) == KVANT_OK) {
        /* what loaded must be consistent: the tokenizer has the model's vocabulary */
        if (!m->tok || tok_n_vocab(m->tok) != m->cfg.vocab_size) abort();
        static const char text[] = "Once upon a time \xff\xc3";
        int32_t ids[64];
        int k = tok_encode(m->tok, text, sizeof text - 1, true, false, ids, 64);
        char piece[256];
        const int max = tok_max_piece(m->tok);
        for (int i = 0; i < k && max <= (int)sizeof piece; i++) {
            if (ids[i] < 0 || ids[i] >= tok_n_vocab(m->tok)) abort();
            tok_decode_piece(m->tok, i ? ids[i - 1] : -1, ids[i], piece, max);
        }
    } else if (st.code == KVANT_OK || !st.msg[0]) {
        abort(); /* a refusal must say why */
    }
    model_close(m);
    close(ck);
    close(tk);
    return 0;
}
