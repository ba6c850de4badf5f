/* test_server_compressed.c - every kind of compressed file kvant writes runs
 * in `kvant serve` exactly as in `kvant run`: stories260K quantized by
 * `kvant quantize` (PTQ zero-point 4-bit g32, absmax 3-bit per channel,
 * 6-bit g64; W8A8; SmoothQuant W8A8; LLM.int8 with synthetic outlier dims)
 * and `kvant prune` (2:4 in S24_Q8), each served and asked for a greedy
 * completion three ways: alone, again (the prefix cache hit), and with
 * n = 3 (three sequences batched in one engine step).  Every text must be
 * the one `kvant run --temp 0` prints.  (QAT exports are the same PTQ types.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "server_util.h"

static const char *PROMPT = "Once upon a time, there was a little girl named Lily. She";

static char *run_text(const char *model) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s run -m %s -p '%s' -n 24 --temp 0 -t 1 2>/dev/null", KVANT_BIN, model, PROMPT);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char *out = calloc(1, 8192);
    size_t n = fread(out, 1, 8191, f);
    out[n] = 0;
    assert_int_equal(pclose(f), 0);
    return out;
}

/* `kvant TOOL stories260K OUT FLAGS` (+ a calibration text when calib) */
static void make(const char *tool, const char *flags, bool calib, const char *out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s %s %s%s%s >/dev/null 2>&1", KVANT_BIN, tool,
             shared_path("models/stories260K.gguf"), out, flags, calib ? " --calib-skip 200000 --calib-tokens 1024 --calib " : "",
             calib ? shared_path("corpora/tinystories_val_subset.txt") : "");
    if (system(cmd) != 0) fail_msg("failed: %s", cmd);
}

static void check_served(const char *model, const char *what) {
    char *want = run_text(model);
    assert_true(strlen(want) > 10);
    server_proc s = start_server(model, "--max-seqs 4", "compressed.log");
    assert_true(s.port > 0);
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}", PROMPT);
    for (int rep = 0; rep < 2; rep++) { /* the second: a prefix-cache hit */
        cJSON *j = post_json(s.port, "/v1/completions", body, NULL);
        if (strcmp(json_str(j, "choices.0.text"), want))
            fail_msg("%s: served '%s' != run '%s' (request %d)", what, json_str(j, "choices.0.text"), want, rep);
        cJSON_Delete(j);
    }
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true,\"n\":3}",
             PROMPT);
    cJSON *j = post_json(s.port, "/v1/completions", body, NULL);
    for (int i = 0; i < 3; i++) {
        char path[32];
        snprintf(path, sizeof path, "choices.%d.text", i);
        if (strcmp(json_str(j, path), want)) fail_msg("%s: batched choice %d '%s' != run '%s'", what, i, json_str(j, path), want);
    }
    cJSON_Delete(j);
    assert_int_equal(stop_server(&s), 0);
    free(want);
}

static void test_compressed_files_serve_as_run(void **state) {
    (void)state;
    static const struct {
        const char *what, *file, *tool, *flags;
        bool calib;
    } files[] = {
        {"PTQ_Z4_G32", "c-z4g32.gguf", "quantize", "--scheme zeropoint --bits 4 --granularity group:32 -q", false},
        {"PTQ_A3_C", "c-a3c.gguf", "quantize", "--scheme absmax --bits 3 --granularity channel -q", false},
        {"PTQ_Z6_G64", "c-z6g64.gguf", "quantize", "--scheme zeropoint --bits 6 --granularity group:64 -q", false},
        {"W8A8", "c-w8a8.gguf", "quantize", "--w8a8", false},
        {"SmoothQuant W8A8", "c-sq.gguf", "quantize", "--smoothquant", true},
        {"LLM.int8", "c-llmint8.gguf", "quantize", "--int8-mixed --inject-outliers 5,17 --inject-scale 40", true},
        {"2:4 S24_Q8", "c-s24.gguf", "prune", "--method magnitude --pattern 2:4 --format sparse24-q8 -q", false},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char out[512];
        snprintf(out, sizeof out, "%s", tmp_path(files[i].file));
        make(files[i].tool, files[i].flags, files[i].calib, out);
        check_served(out, files[i].what);
        printf("  %s: served text == kvant run's (alone, prefix-cache hit, n = 3)\n", files[i].what);
    }
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_compressed_files_serve_as_run)};
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
