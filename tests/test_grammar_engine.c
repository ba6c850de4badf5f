/* test_grammar_engine.c - structured outputs through the engine: every
 * sample of a request with a grammar follows it (JSON Schema outputs parse
 * and validate, GBNF outputs are in the language), at temperature 1 and with
 * n > 1, beside a free-text request whose output the grammar does not touch;
 * schemas kvant cannot compile are refused naming the keyword.  The
 * built-in stories260K (512 tokens, byte fallback: any text can be spelled). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvant.h"
#include "testutil.h"

typedef struct {
    char text[8][2048];
    int len[8];
    kvant_finish fin[8];
} outputs;

/* runs prompt with req to its end (n samples), with an optional free-text
 * request beside it; the texts as kvant_token_to_piece writes them */
static void run(kvant_model *m, const char *prompt, const kvant_request *req, outputs *o, const kvant_request *other,
                outputs *oo) {
    kvant_status st;
    kvant_engine *e = kvant_engine_new(m, NULL, &st);
    assert_non_null(e);
    int32_t t[256];
    const int n = kvant_tokenize(m, prompt, strlen(prompt), true, t, 256);
    assert_true(n > 0);
    memset(o, 0, sizeof *o);
    if (oo) memset(oo, 0, sizeof *oo);
    const int64_t id = kvant_engine_submit(e, t, n, req, &st);
    if (id <= 0) fail_msg("%s", st.msg);
    const int64_t id2 = other ? kvant_engine_submit(e, t, n, other, &st) : -2;
    int32_t prev[2][8];
    for (int i = 0; i < 8; i++) prev[0][i] = prev[1][i] = t[n - 1];
    const int want = (req->n ? req->n : 1) + (other ? 1 : 0);
    kvant_event ev[64];
    for (int done = 0, step = 0; done < want && step < 20000; step++) {
        const int k = kvant_engine_step(e, ev, 64, &st);
        assert_true(k >= 0);
        for (int i = 0; i < k; i++) {
            outputs *dst = ev[i].id == id ? o : ev[i].id == id2 ? oo : NULL;
            assert_non_null(dst);
            const int w = dst == o ? 0 : 1, c = ev[i].index;
            if (ev[i].token >= 0) {
                char piece[64];
                const int len = kvant_token_to_piece(m, prev[w][c], ev[i].token, piece, sizeof piece);
                assert_true(dst->len[c] + len < 2048);
                memcpy(dst->text[c] + dst->len[c], piece, (size_t)len);
                dst->len[c] += len;
                prev[w][c] = ev[i].token;
            }
            if (ev[i].finish != KVANT_FINISH_NONE) dst->fin[c] = ev[i].finish, done++;
        }
    }
    kvant_engine_free(e);
}

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"maxLength\": 12},"
    "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120},"
    "\"pet\": {\"enum\": [\"cat\", \"dog\", null]},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 6}, \"maxItems\": 3}},"
    "\"required\": [\"name\", \"age\"]}";

static bool valid(const char *text) {
    cJSON *j = cJSON_Parse(text);
    if (!cJSON_IsObject(j)) return cJSON_Delete(j), false;
    const cJSON *name = cJSON_GetObjectItem(j, "name"), *age = cJSON_GetObjectItem(j, "age"),
                *pet = cJSON_GetObjectItem(j, "pet"), *tags = cJSON_GetObjectItem(j, "tags");
    bool ok = cJSON_IsString(name) && strlen(name->valuestring) <= 12 * 4 && cJSON_IsNumber(age) &&
              age->valuedouble >= 0 && age->valuedouble <= 120 && age->valuedouble == (int)age->valuedouble;
    if (pet) ok = ok && (cJSON_IsNull(pet) || (cJSON_IsString(pet) && (!strcmp(pet->valuestring, "cat") ||
                                                                      !strcmp(pet->valuestring, "dog"))));
    if (tags) ok = ok && cJSON_IsArray(tags) && cJSON_GetArraySize(tags) <= 3;
    for (const cJSON *k = j->child; k; k = k->next)
        ok = ok && (!strcmp(k->string, "name") || !strcmp(k->string, "age") || !strcmp(k->string, "pet") ||
                    !strcmp(k->string, "tags"));
    cJSON_Delete(j);
    return ok;
}

/* 5 requests x n 8 at temperature 1: all 40 outputs end by the grammar and validate */
static void test_json_schema_samples(void **state) {
    (void)state;
    kvant_status st;
    kvant_model *m = kvant_model_open(NULL, NULL, &st);
    kvant_grammar *g = kvant_grammar_new(m, KVANT_GRAMMAR_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &st);
    if (!g) fail_msg("%s", st.msg);
    int n_valid = 0, n_done = 0;
    for (int rep = 0; rep < 5; rep++) {
        kvant_request r = {.sampling = kvant_sampling_default(), .max_tokens = 400, .n = 8, .grammar = g};
        r.sampling.temperature = 1.0f, r.sampling.top_k = 0, r.sampling.top_p = 1.0f, r.sampling.min_p = 0;
        r.sampling.seed = 100 + (uint64_t)rep;
        outputs o;
        run(m, "Once upon a time", &r, &o, NULL, NULL);
        for (int i = 0; i < 8; i++) {
            o.text[i][o.len[i]] = 0;
            if (o.fin[i] == KVANT_FINISH_EOS) {
                n_done++;
                if (valid(o.text[i])) n_valid++;
                else print_error("invalid: %s\n", o.text[i]);
            }
        }
        if (rep == 0) printf("sample: %s\n", o.text[0]);
    }
    kvant_grammar_free(g); /* the engines kept their references while they ran */
    printf("JSON Schema (4 properties, 2 required): %d of 40 samples ended by the grammar, %d valid\n", n_done,
           n_valid);
    assert_int_equal(n_valid, n_done);
    assert_true(n_done >= 36); /* a few may run into max_tokens inside a long string */
    kvant_model_free(m);
}

/* GBNF: exactly the language; a free-text request beside it is unchanged */
static void test_gbnf_and_neighbour(void **state) {
    (void)state;
    kvant_status st;
    kvant_model *m = kvant_model_open(NULL, NULL, &st);
    const char *gb = "root ::= (\"yes\" | \"no\") \" \" [0-9] [0-9]?\n";
    kvant_grammar *g = kvant_grammar_new(m, KVANT_GRAMMAR_GBNF, gb, strlen(gb), &st);
    if (!g) fail_msg("%s", st.msg);
    kvant_request r = {.sampling = kvant_sampling_default(), .max_tokens = 16, .n = 4, .grammar = g};
    r.sampling.seed = 7;
    kvant_request free_text = {.sampling = kvant_sampling_default(), .max_tokens = 24};
    free_text.sampling.temperature = 0;
    outputs o, oo, alone;
    run(m, "The answer is", &r, &o, &free_text, &oo);
    run(m, "The answer is", &free_text, &alone, NULL, NULL);
    for (int i = 0; i < 4; i++) {
        o.text[i][o.len[i]] = 0;
        const bool ok = (!strncmp(o.text[i], "yes ", 4) || !strncmp(o.text[i], "no ", 3)) && o.fin[i] != KVANT_FINISH_ERROR;
        if (!ok) fail_msg("not in the language: '%s'", o.text[i]);
    }
    assert_int_equal(oo.len[0], alone.len[0]);
    assert_memory_equal(oo.text[0], alone.text[0], (size_t)alone.len[0]);
    kvant_grammar_free(g);
    kvant_model_free(m);
}

static void test_refusals(void **state) {
    (void)state;
    kvant_status st;
    kvant_model *m = kvant_model_open(NULL, NULL, &st);
    const char *bad = "{\"type\": \"object\", \"patternProperties\": {\"^x\": {}}}";
    assert_null(kvant_grammar_new(m, KVANT_GRAMMAR_JSON_SCHEMA, bad, strlen(bad), &st));
    assert_int_equal(st.code, KVANT_ERR_UNSUPPORTED);
    assert_non_null(strstr(st.msg, "patternProperties"));
    assert_null(kvant_grammar_new(m, KVANT_GRAMMAR_GBNF, "root ::= x", 10, &st)); /* x undefined */
    assert_null(kvant_grammar_new(m, (kvant_grammar_kind)9, "", 0, &st));
    assert_int_equal(st.code, KVANT_ERR_ARG);
    kvant_grammar *g = kvant_grammar_new(m, KVANT_GRAMMAR_JSON_OBJECT, NULL, 0, &st);
    assert_non_null(g);
    kvant_engine *e = kvant_engine_new(m, NULL, &st);
    int32_t t[2] = {1, 2};
    kvant_request r = {.embed = true, .grammar = g};
    assert_true(kvant_engine_submit(e, t, 2, &r, &st) < 0); /* an embedding takes no grammar */
    kvant_engine_free(e);
    kvant_grammar_free(g);
    kvant_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_schema_samples),
        cmocka_unit_test(test_gbnf_and_neighbour),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
