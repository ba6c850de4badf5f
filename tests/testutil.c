#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

const char *shared_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", KVANT_SHARED_DIR, rel);
    return buf;
}

const char *tmp_path(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", KVANT_TEST_TMP, name);
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
