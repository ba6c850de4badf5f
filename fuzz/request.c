/* request.c - fuzz harness: the HTTP API's request validation (server/
 * validate.c, server/embed.c): a JSON body -> the engine request, every
 * field checked, the prompt rendered and tokenized, grammars and schemas
 * compiled, without libmicrohttpd or an engine.
 * Input: byte 0 picks the endpoint (low 3 bits: /v1/completions,
 * /v1/chat/completions, /v1/embeddings, /apply-template, /tokenize,
 * /detokenize, then completions and chat again) and the chat template
 * (the rest: 0 the model's, else one of chat.h's); the rest is the body,
 * parsed as server/http.c does (cJSON, an object).  The server state is the
 * built-in model (stories260K, loaded once) and a struct srv with the
 * fields the validators read.  A body must be accepted or refused with a
 * message and an HTTP status, never leak (srv_parsed_free frees it all),
 * read out of bounds or take more than a second. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct srv fz_srv;
static kvant_chat_template fz_detected;
static bool fz_verbose; /* FUZZ_VERBOSE=1: each input's outcome on stderr (to check the seeds) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_verbose = getenv("FUZZ_VERBOSE") != NULL;
    kvant_status st = {0};
    kvant_model *m = kvant_model_open(NULL, NULL, &st); /* the built-in model; kept for the process */
    if (!m) abort();
    srv *s = &fz_srv;
    s->m = m;
    kvant_model_get_info(m, &s->info);
    snprintf(s->model_id, sizeof s->model_id, "stories260K"); /* as the tests start it (-m ... --model-id) */
    s->max_ctx = s->info.n_ctx_train;
    s->p.max_body = 1 << 20;
    s->p.default_max_tokens = 16;
    s->chat_kind = fz_detected = kvant_chat_detect(m);
    pthread_mutex_init(&s->reg_mu, NULL);
    srv_metrics_init(&s->mt);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv *s = &fz_srv;
    const int endpoint = data[0] & 7, kind = data[0] >> 3;
    s->chat_kind = kind == 0 ? fz_detected : (kvant_chat_template)((kind - 1) % KVANT_CHAT_N_TEMPLATES);
    cJSON *j = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (!j) return 0;
    if (!cJSON_IsObject(j)) { /* refused before validation (http.c's body_json) */
        cJSON_Delete(j);
        return 0;
    }
    parsed p = {0};
    verr v = {0};
    bool ok;
    switch (endpoint) {
    case 0: case 6: ok = srv_validate_completion(s, j, &p, &v); break;
    case 1: case 7: ok = srv_validate_chat(s, j, &p, &v); break;
    case 2: ok = srv_validate_embeddings(s, j, &p, &v); break;
    case 3: ok = srv_validate_apply_template(s, j, &p, &v); break;
    case 4: ok = srv_validate_tokenize(s, j, &p, &v); break;
    default: ok = srv_validate_detokenize(s, j, &p, &v); break;
    }
    if (fz_verbose) fprintf(stderr, "request: endpoint %d: %s %d %s%s%s\n", endpoint, ok ? "accepted" : "refused",
                            v.status, v.msg, v.param ? " param " : "", v.param ? v.param : "");
    if (!ok) {
        if (!v.msg[0]) abort(); /* a refusal says why */
        if (v.status && (v.status < 400 || v.status > 599)) abort();
    } else if (endpoint <= 1 || endpoint >= 6) {
        /* a generation: a prompt within the context, n_return <= n */
        if (p.n_prompt <= 0 || p.n_prompt > s->max_ctx || !p.tok) abort();
        for (int i = 0; i < p.n_prompt; i++)
            if (p.tok[i] < 0 || p.tok[i] >= s->info.vocab_size) abort();
        if (p.n_stops < 0 || p.n_stops > SRV_MAX_STOPS) abort();
    } else if (endpoint == 2) {
        if (p.n_inputs <= 0 || p.n_inputs > SRV_MAX_EMBED_INPUTS) abort();
        for (int i = 0; i < p.n_inputs; i++)
            for (int k = 0; k < p.in_n[i]; k++)
                if (p.in_tok[i][k] < 0 || p.in_tok[i][k] >= s->info.vocab_size) abort();
    }
    srv_parsed_free(&p);
    cJSON_Delete(j);
    return 0;
}
