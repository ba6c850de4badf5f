#define _GNU_SOURCE /* memmem in gguf_malformed.c */
/* test_cli.c - the command line as a user meets it: --help, exit codes for
 * bad flags and missing files, one-line errors for malformed model files,
 * `kvant info` numbers for stories260K, --no-cache giving the same text. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "gguf_malformed.c"

static char *kv(const char *args, int *rc) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s", KVANT_BIN, args);
    return run_capture(cmd, rc);
}

static void expect_exit(const char *args, int want, const char *stderr_has) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s 2>&1 >/dev/null", args); /* capture stderr only */
    int rc;
    char *err = kv(cmd, &rc);
    if (rc != want) fail_msg("kvant %s: exit %d, want %d (stderr: %s)", args, rc, want, err);
    if (stderr_has && !strstr(err, stderr_has)) fail_msg("kvant %s: stderr lacks '%s': %s", args, stderr_has, err);
    free(err);
}

static void test_help(void **state) {
    (void)state;
    int rc;
    const char *cmds[] = {"--help", "run --help", "info --help", "run -h"};
    for (size_t i = 0; i < 4; i++) {
        char *out = kv(cmds[i], &rc);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "usage: kvant"));
        free(out);
    }
    char *out = kv("run --help", &rc);
    const char *flags[] = {"-m", "-z", "-p", "-n", "--temp", "--top-k", "--top-p", "--min-p", "--seed", "-t",
                           "--no-cache", "--repeat-penalty"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strstr(out, flags[i])) fail_msg("run --help does not mention %s", flags[i]);
    free(out);
}

static void test_usage_errors(void **state) {
    (void)state;
    char args[4096];
    expect_exit("", 2, "usage");
    expect_exit("frobnicate", 2, "unknown command");
    expect_exit("run --bogus", 2, "unknown option");
    expect_exit("run -m /nonexistent/model.gguf", 2, "/nonexistent/model.gguf");
    expect_exit("info -m /nonexistent/model.gguf", 2, "cannot open");
    snprintf(args, sizeof args, "run -m %s --bogus", shared_path("models/stories260K.gguf"));
    expect_exit(args, 2, "unknown option '--bogus'");
    snprintf(args, sizeof args, "run -m %s -n abc", shared_path("models/stories260K.gguf"));
    expect_exit(args, 2, "expected an integer");
    snprintf(args, sizeof args, "run -m %s --top-p 2", shared_path("models/stories260K.gguf"));
    expect_exit(args, 2, "must be in");
    snprintf(args, sizeof args, "run -m %s -n", shared_path("models/stories260K.gguf"));
    expect_exit(args, 2, "needs a value");
    snprintf(args, sizeof args, "run -m %s", shared_path("models/stories260K.bin"));
    expect_exit(args, 1, "tokenizer");
    snprintf(args, sizeof args, "info -m %s", shared_path("tokenizers/ggml-vocab-gpt-2.gguf"));
    expect_exit(args, 1, "architecture");
}

/* every malformed GGUF: non-zero exit, exactly one line on stderr naming the file */
static void test_malformed_gguf_files(void **state) {
    (void)state;
    gguf_malformed_case *cases = NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tmp_path("malformed-cli"));
    const int n = gguf_malformed_write(dir, &cases);
    assert_true(n >= 20);
    for (int i = 0; i < n; i++) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "info -m %s/%s 2>&1 >/dev/null", dir, cases[i].file);
        int rc;
        char *err = kv(cmd, &rc);
        if (rc == 0 || rc > 2) fail_msg("%s: exit %d (stderr: %s)", cases[i].file, rc, err);
        const char *nl = strchr(err, '\n');
        if (!nl || nl[1] != 0) fail_msg("%s: stderr is not one line: %s", cases[i].file, err);
        if (!strstr(err, cases[i].file)) fail_msg("%s: message does not name the file: %s", cases[i].file, err);
        free(err);
    }
    free(cases);
}

/* truncated / hostile llama2.c checkpoints */
static void test_malformed_llama2c(void **state) {
    (void)state;
    size_t size;
    char *bin = read_file(shared_path("models/stories260K.bin"), &size);
    const size_t cuts[] = {0, 10, 27, 28, 1000, size / 2, size - 4};
    char path[4096], args[8192];
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        snprintf(path, sizeof path, "%s/trunc-%zu.bin", KVANT_TEST_TMP, cuts[i]);
        FILE *f = fopen(path, "wb");
        fwrite(bin, 1, cuts[i], f);
        fclose(f);
        snprintf(args, sizeof args, "info -m %s -z %s", path, shared_path("models/tok512.bin"));
        expect_exit(args, 1, path);
    }
    /* hostile header: huge dims must be refused before any allocation */
    int32_t h[7] = {1 << 30, 1 << 30, 1 << 20, 1, 1, 1 << 30, 1 << 30};
    snprintf(path, sizeof path, "%s/huge.bin", KVANT_TEST_TMP);
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f);
    fwrite(bin + 28, 1, 4096, f);
    fclose(f);
    snprintf(args, sizeof args, "info -m %s -z %s", path, shared_path("models/tok512.bin"));
    expect_exit(args, 1, "out of range");
    int32_t g[7] = {64, 172, 5, 8, 3, 512, 512}; /* 3 KV heads do not divide 8 */
    f = fopen(path, "wb");
    fwrite(g, sizeof g, 1, f);
    fwrite(bin + 28, 1, size - 28, f);
    fclose(f);
    expect_exit(args, 1, "KV head count");
    free(bin);
}

static long field(const char *out, const char *label) {
    const char *p = strstr(out, label);
    if (!p) fail_msg("info output lacks '%s'", label);
    return strtol(p + strlen(label), NULL, 10);
}

/* stories260K: 64 dim, 172 hidden, 5 layers, 8 heads, 4 KV heads (GQA),
 * head dim 8, vocab 512.  Parameters by hand: per layer q 64x64 + k 64x32 +
 * v 64x32 + o 64x64 + 3 x 64x172 + 2 norms x 64 = 45440; x 5 = 227200;
 * plus embedding 512x64, output_norm 64, and in the GGUF a separate
 * output 512x64: 292800 (GGUF), 260032 (llama2.c, shared classifier).
 * KV per token: 2 x 5 layers x 4 KV heads x 8 dims x 2 bytes (F16, the
 * default) = 640. */
static void test_info_stories260k(void **state) {
    (void)state;
    int rc;
    char args[4096];
    snprintf(args, sizeof args, "info -m %s", shared_path("models/stories260K.gguf"));
    char *out = kv(args, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(field(out, "embedding dim:"), 64);
    assert_int_equal(field(out, "FFN hidden dim:"), 172);
    assert_int_equal(field(out, "layers:"), 5);
    assert_int_equal(field(out, "attention heads:"), 8);
    assert_int_equal(field(out, "KV heads:"), 4);
    assert_non_null(strstr(out, "(GQA)"));
    assert_int_equal(field(out, "head dim:"), 8);
    assert_int_equal(field(out, "vocabulary:"), 512);
    assert_int_equal(field(out, "parameters:"), 292800);
    assert_int_equal(field(out, "weights:"), 292800 * 4);
    assert_non_null(strstr(out, "2 x 5 x 4 x 8 x 2 = 640 bytes"));
    assert_int_equal(field(out, "full context 2048:"), 640 * 2048);
    assert_int_equal(field(out, "per token (F32):"), 1280);
    free(out);
    char bin[2048];
    snprintf(bin, sizeof bin, "%s", shared_path("models/stories260K.bin"));
    snprintf(args, sizeof args, "info -m %s -z %s", bin, shared_path("models/tok512.bin"));
    out = kv(args, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(field(out, "parameters:"), 260032);
    assert_non_null(strstr(out, "tied to the token embedding"));
    free(out);
}

/* --no-cache recomputes everything and must print the same text; -s fixes
 * a sampled run; the stats block is complete */
static void test_run_modes(void **state) {
    (void)state;
    int rc;
    char args[4096];
    const char *m = shared_path("models/stories260K.gguf");
    char *outs[4];
    const char *variants[4] = {"--temp 0", "--temp 0 --no-cache", "--temp 0.9 -s 7", "--temp 0.9 -s 7 -t 1"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "run -m %s -p 'The cat' -n 40 %s 2>/dev/null", m, variants[i]);
        outs[i] = kv(args, &rc);
        assert_int_equal(rc, 0);
        assert_true(strlen(outs[i]) > 40);
    }
    assert_string_equal(outs[0], outs[1]);
    assert_string_equal(outs[2], outs[3]);
    for (int i = 0; i < 4; i++) free(outs[i]);
    snprintf(args, sizeof args, "run -m %s -p 'The cat' -n 8 --temp 0 2>&1 >/dev/null", m);
    char *err = kv(args, &rc);
    const char *labels[] = {"prompt tokens:", "generated tokens:", "TTFT:", "prefill:", "TPOT:", "decode:",
                            "KV cache in use:"};
    for (size_t i = 0; i < sizeof labels / sizeof *labels; i++)
        if (!strstr(err, labels[i])) fail_msg("stats lack '%s': %s", labels[i], err);
    assert_int_equal(field(err, "generated tokens:"), 8);
    /* BOS + "The cat" and 8 new tokens: the cache holds all but the last token, at
     * 640 bytes each (F16, the default, as info says) */
    const long np = field(err, "prompt tokens:");
    assert_int_equal(field(err, "KV cache in use:"), (np + 7) * 640);
    free(err);
}

/* `kvant bench -d`: one JSON row per depth and test, each naming its depth
 * and the KV bytes per cached token (stories260K F16 K/V: 640), and bad
 * depth lists refused as usage errors */
static void test_bench_depth(void **state) {
    (void)state;
    int rc;
    char args[4096];
    const char *m = shared_path("models/stories260K.gguf");
    snprintf(args, sizeof args, "bench -m %s -p 16 -n 4 -r 1 -t 2 -d 0,40,300 --json 2>/dev/null", m);
    char *out = kv(args, &rc);
    assert_int_equal(rc, 0);
    const char *want[] = {"\"test\": \"pp16\"", "\"test\": \"tg4\"", "\"test\": \"pp16 @ d40\"",
                          "\"test\": \"tg4 @ d40\"", "\"test\": \"pp16 @ d300\"", "\"test\": \"tg4 @ d300\"",
                          "\"n_depth\": 300", "\"kv_bytes_per_token\": 640"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(out, want[i])) fail_msg("bench -d output lacks %s: %s", want[i], out);
    int rows = 0;
    for (const char *p = out; (p = strstr(p, "avg_ts")); p++) rows++;
    assert_int_equal(rows, 6);
    free(out);
    snprintf(args, sizeof args, "bench -m %s -d 5,x", m);
    expect_exit(args, 2, "-d wants depths");
    snprintf(args, sizeof args, "bench -m %s -d -3", m);
    expect_exit(args, 2, "-d wants depths");
}

/* the n numbers of the JSON array after `key` in line (a pointer into it) */
static void json_numbers(const char *line, const char *key, double *v, int n) {
    const char *p = strstr(line, key);
    assert_non_null(p);
    p = strchr(p, '[');
    assert_non_null(p);
    for (int i = 0; i < n; i++) {
        char *end;
        v[i] = strtod(p + 1, &end);
        assert_true(end > p + 1);
        p = end;
    }
    assert_int_equal(*p, ']');
}

/* `kvant bench --vs`: per test a row for each model and a ratio row whose
 * samples are run-by-run quotients of the two rows' samples, its median
 * their middle one; --vs refuses the INT8 options and a missing file */
static void test_bench_vs(void **state) {
    (void)state;
    int rc;
    char args[8192];
    const char *gguf = shared_path("models/stories260K.gguf");
    char bin[2048], tok[2048];
    snprintf(bin, sizeof bin, "%s", shared_path("models/stories260K.bin"));
    snprintf(tok, sizeof tok, "%s", shared_path("models/tok512.bin"));
    snprintf(args, sizeof args, "bench -m %s --vs %s -z %s -p 8 -n 4 -r 3 -t 2 -d 0,12 --json 2>/dev/null", gguf, bin,
             tok);
    char *out = kv(args, &rc);
    assert_int_equal(rc, 0);
    int rows = 0, ratios = 0;
    const char *tests[] = {"\"pp8\"", "\"tg4\"", "\"pp8 @ d12\"", "\"tg4 @ d12\""};
    for (char *line = strtok(out, "\n"), *prev[2] = {NULL, NULL}; line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"avg_ts\"")) {
            prev[0] = prev[1], prev[1] = line;
            rows++;
            continue;
        }
        assert_non_null(strstr(line, "\"ratio\": \"llama F32 / stories260K.bin F32\""));
        assert_non_null(prev[0]);
        assert_non_null(strstr(line, tests[ratios]));
        assert_non_null(strstr(prev[0], tests[ratios]));
        assert_non_null(strstr(prev[1], tests[ratios]));
        assert_non_null(strstr(prev[0], "\"model\": \"llama F32\""));
        assert_non_null(strstr(prev[1], "\"model\": \"stories260K.bin F32\""));
        double a[3], b[3], q[3], med;
        json_numbers(prev[0], "\"samples_ts\"", a, 3);
        json_numbers(prev[1], "\"samples_ts\"", b, 3);
        json_numbers(line, "\"samples\"", q, 3);
        for (int i = 0; i < 3; i++) {
            assert_true(a[i] > 0 && b[i] > 0);
            if (fabs(q[i] - a[i] / b[i]) > 1e-4 + 1e-3 * q[i])
                fail_msg("ratio sample %d: %g, want %g / %g", i, q[i], a[i], b[i]);
        }
        const char *m = strstr(line, "\"median\": ");
        assert_non_null(m);
        med = atof(m + strlen("\"median\": "));
        int below = 0, above = 0;
        for (int i = 0; i < 3; i++) below += q[i] < med, above += q[i] > med;
        assert_true(below <= 1 && above <= 1);
        prev[0] = prev[1] = NULL;
        ratios++;
    }
    assert_int_equal(rows, 8);
    assert_int_equal(ratios, 4);
    free(out);
    snprintf(args, sizeof args, "bench -m %s --vs %s --w8a8", gguf, gguf);
    expect_exit(args, 2, "--vs compares two model files");
    snprintf(args, sizeof args, "bench -m %s --vs /nonexistent/b.gguf -n 1 -p 0", gguf);
    expect_exit(args, 2, "/nonexistent/b.gguf");
}

/* `kvant prune --iterative` runs the training loop's masked fine-tuning and
 * reaches the asked sparsity of the layer matrices (reported on stderr). */
static void test_prune_iterative(void **state) {
    (void)state;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s prune %s/models/stories260K.gguf %s/iter.gguf --iterative --sparsity 0.7 --steps 2 "
             "--finetune-steps 1 -f %s/corpora/tinystories_val_subset.txt --batch 1 --ctx 32 --eval-every 0 2>&1",
             KVANT_BIN, KVANT_SHARED_DIR, KVANT_TEST_TMP, KVANT_SHARED_DIR);
    int rc = -1;
    char *out = run_capture(cmd, &rc);
    assert_non_null(out);
    assert_int_equal(rc, 0);
    const char *s = strstr(out, "sparsity of the layer matrices: ");
    assert_non_null(s);
    double sp = atof(s + strlen("sparsity of the layer matrices: "));
    assert_true(sp >= 69.9 && sp <= 71.0);
    free(out);
    snprintf(cmd, sizeof cmd, "%s prune x y --iterative --no-such-flag 2>/dev/null", KVANT_BIN);
    out = run_capture(cmd, &rc);
    assert_int_equal(rc, 2);
    free(out);
}

/* No -m: the built-in stories260K (model/builtin.c), said on stderr, the same
 * text as the shared file gives (they are the same bytes) */
static void test_builtin_model(void **state) {
    (void)state;
    int rc;
    char args[4096];
    char *builtin = kv("run -n 48 --temp 0 -p 'Once upon a time' 2>/dev/null", &rc);
    assert_int_equal(rc, 0);
    snprintf(args, sizeof args, "run -m %s -n 48 --temp 0 -p 'Once upon a time' 2>/dev/null",
             shared_path("models/stories260K.gguf"));
    char *file = kv(args, &rc);
    assert_int_equal(rc, 0);
    assert_true(strlen(builtin) > 40);
    assert_string_equal(builtin, file);
    free(builtin), free(file);
    char *err = kv("run -n 4 --temp 0 2>&1 >/dev/null", &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(err, "using the built-in stories260K"));
    free(err);
    char *info = kv("info", &rc); /* info without -m is still a usage error: it describes a file */
    assert_int_equal(rc, 2);
    free(info);
}

int main(void) {
    mkdir(KVANT_TEST_TMP, 0755);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_malformed_gguf_files),
        cmocka_unit_test(test_malformed_llama2c),
        cmocka_unit_test(test_info_stories260k),
        cmocka_unit_test(test_bench_depth),
        cmocka_unit_test(test_bench_vs),
        cmocka_unit_test(test_run_modes),
        cmocka_unit_test(test_builtin_model),
        cmocka_unit_test(test_prune_iterative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
