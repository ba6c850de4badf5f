#define _GNU_SOURCE /* memmem, strndup */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The path helpers return one of 8 buffers in turn, so a call may pass
 * several of them to one function: the order the compiler evaluates
 * arguments in (gcc and clang differ) cannot make two the same buffer. */
static char *path_buf(void) {
    static char bufs[8][4096];
    static int next;
    return bufs[next++ & 7];
}

const char *shared_path(const char *rel) {
    char *buf = path_buf();
    snprintf(buf, 4096, "%s/%s", KVANT_SHARED_DIR, rel);
    return buf;
}

const char *tmp_path(const char *name) {
    char *buf = path_buf();
    snprintf(buf, 4096, "%s/%s", KVANT_TEST_TMP, name);
    return buf;
}

char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    if (size) *size = (size_t)n;
    return buf;
}

int json_int_array(const char *json, const char *key, int32_t *out, int max) {
    char pat[256];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    p = strchr(p, '[');
    if (!p) return -1;
    p++;
    int n = 0;
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        if (n < max) out[n] = (int32_t)v;
        n++;
        p = end;
    }
    return n;
}

char *run_capture(const char *cmd, int *exit_status) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(f);
    *exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return buf;
}

/* The .inp/.out pair of a vocabulary, split as test-tokenizer-0.cpp does. */
void read_vectors(const char *rel, tok_vectors *v) {
    char path[4200];
    snprintf(path, sizeof path, "%s.inp", shared_path(rel));
    size_t size;
    char *raw = read_file(path, &size);
    snprintf(path, sizeof path, "%s.out", shared_path(rel));
    char *out = read_file(path, NULL);
    memset(v, 0, sizeof *v);
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep), pos = 0;
    while (pos < size) {
        const char *hit = memmem(raw + pos, size - pos, sep, sl);
        size_t end = hit ? (size_t)(hit - raw) : size;
        v->inp = realloc(v->inp, (v->n + 1) * sizeof *v->inp);
        v->inp_len = realloc(v->inp_len, (v->n + 1) * sizeof *v->inp_len);
        v->inp[v->n] = strndup(raw + pos, end - pos);
        v->inp_len[v->n] = end - pos;
        v->n++;
        if (!hit) break;
        pos = end + sl;
    }
    int lines = 0;
    for (char *line = out; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        v->ids = realloc(v->ids, (lines + 1) * sizeof *v->ids);
        v->n_ids = realloc(v->n_ids, (lines + 1) * sizeof *v->n_ids);
        v->ids[lines] = malloc((strlen(line) / 2 + 1) * sizeof(int32_t));
        int k = 0;
        for (char *p = line, *e; ; p = e) {
            long x = strtol(p, &e, 10);
            if (e == p) break;
            v->ids[lines][k++] = (int32_t)x;
        }
        v->n_ids[lines++] = k;
        if (!nl) break;
        line = nl + 1;
    }
    assert_int_equal(lines, v->n);
    free(raw);
    free(out);
}

void free_vectors(tok_vectors *v) {
    for (int i = 0; i < v->n; i++) {
        free(v->inp[i]);
        free(v->ids[i]);
    }
    free(v->inp);
    free(v->inp_len);
    free(v->ids);
    free(v->n_ids);
}

int plain_sampled(kvant_model *m, const int32_t *prompt, int np, int ng, const kvant_sampling *sp, int32_t eos,
                  int32_t *out) {
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    const int V = info.vocab_size;
    kvant_status st;
    kvant_seq *s = kvant_seq_new(m, 512, &st);
    kvant_sampler *smp = kvant_sampler_new(sp, V, &st);
    assert_non_null(s);
    assert_non_null(smp);
    for (int i = 0; i < np; i++) kvant_sampler_accept(smp, prompt[i]);
    float *lg = malloc(sizeof(float) * V);
    assert_int_equal(kvant_forward(s, prompt, np, lg, false, &st), KVANT_OK);
    int n = 0;
    while (n < ng) {
        const int32_t t = kvant_sampler_sample(smp, lg);
        kvant_sampler_accept(smp, t);
        if (t == eos) break;
        out[n++] = t;
        if (n < ng) assert_int_equal(kvant_forward(s, &t, 1, lg, false, &st), KVANT_OK);
    }
    free(lg);
    kvant_sampler_free(smp);
    kvant_seq_free(s);
    return n;
}
