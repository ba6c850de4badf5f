/* validate.c - request bodies -> parsed requests, one function per
 * endpoint.  Every field is type- and range-checked; a refusal names the
 * field (verr.param) in OpenAI's error shape.  Generation requests are
 * tokenized here and checked against the context.
 *
 * The rule for fields (README, "Request fields", has the table): a field
 * that changes the output is honoured or refused with a 400 that names it;
 * nothing is dropped silently.  Fields kvant does not know are refused (as
 * OpenAI does: "Unrecognized request argument"), so a typo or a sampler
 * kvant lacks shows up at once; annotations that change nothing (user,
 * metadata, store, service_tier, ...) are accepted, type-checked and
 * ignored.  Structured outputs (response_format, grammar, json_schema) are
 * compiled here, in the request's thread (parse_structured), and so is a
 * forced tool call (parse_tool_choice); function.strict beside tool_choice
 * "auto" is refused in ONE place below, "NOT SUPPORTED YET". */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_internal.h"

bool srv_bad(verr *v, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->param = param;
    return false;
}

/* ---- fields -------------------------------------------------------------------- */
static cJSON *field(cJSON *j, const char *name) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    return f && !cJSON_IsNull(f) ? f : NULL; /* null is absent, as OpenAI's clients send it */
}

/* number field: absent/null keeps *out; wrong type or range is an error */
static bool get_num(cJSON *j, const char *name, double lo, double hi, bool integer, double *out, verr *v) {
    cJSON *f = field(j, name);
    if (!f) return true;
    if (!cJSON_IsNumber(f)) return srv_bad(v, name, "'%s' must be a number", name);
    const double x = f->valuedouble;
    if (integer && !(x >= -9.2e18 && x <= 9.2e18 && x == (double)(int64_t)x))
        return srv_bad(v, name, "'%s' must be an integer", name);
    if (!(x >= lo && x <= hi)) return srv_bad(v, name, "'%s' must be in [%g, %g], got %g", name, lo, hi, x);
    *out = x;
    return true;
}

static bool get_bool(cJSON *j, const char *name, bool *out, verr *v) {
    cJSON *f = field(j, name);
    if (!f) return true;
    if (!cJSON_IsBool(f)) return srv_bad(v, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return true;
}

/* whether j nests objects / arrays more than max levels deep ({} is one) */
static bool deeper_than(const cJSON *j, int max) {
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) return false;
    if (max <= 0) return true;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) if (deeper_than(e, max - 1)) return true;
    return false;
}

void srv_parsed_free(parsed *p) {
    free(p->text);
    free(p->ids);
    free(p->tok);
    free(p->echo_text);
    free(p->bias);
    kvant_grammar_free(p->req.grammar); /* the engine keeps its own reference once submitted */
    for (int i = 0; i < p->n_stops; i++) free(p->stops[i]);
    for (int i = 0; i < p->n_inputs; i++) free(p->in_tok[i]);
    free(p->in_tok);
    free(p->in_n);
}

/* ---- the fields each endpoint takes ----------------------------------------------
 * Every top-level field of /v1/completions (C) and /v1/chat/completions (H).
 * A field outside this table is refused by name; so is one on the other
 * endpoint, and one given twice (JSON allows it; which one wins is not
 * defined).  What each does: README, "Request fields". */
enum { C = 1, H = 2, CH = 3 };
static const struct {
    const char *name;
    int where;
} known_fields[] = {
    /* the request */
    {"model", CH}, {"prompt", C}, {"messages", H}, {"stream", CH}, {"stream_options", CH},
    /* length and stops */
    {"max_tokens", CH}, {"max_completion_tokens", H}, {"stop", CH}, {"ignore_eos", CH},
    /* sampling */
    {"temperature", CH}, {"top_p", CH}, {"top_k", CH}, {"min_p", CH}, {"seed", CH}, {"n", CH}, {"best_of", C},
    {"presence_penalty", CH}, {"frequency_penalty", CH}, {"repeat_penalty", CH}, {"repetition_penalty", CH},
    {"repeat_last_n", CH}, {"logit_bias", CH},
    /* output shape */
    {"logprobs", CH}, {"top_logprobs", H}, {"echo", C}, {"suffix", C},
    /* tools (parse_messages; tool_choice "required" / a named function: parse_tool_choice) */
    {"tools", H}, {"tool_choice", H},
    /* structured outputs (parse_structured) */
    {"response_format", CH}, {"grammar", CH}, {"json_schema", CH},
    /* refused (refuse_unsupported) */
    {"functions", H}, {"function_call", H},
    {"modalities", H}, {"audio", H}, {"reasoning_effort", H}, {"web_search_options", H},
    /* annotations and hints that change nothing: accepted, checked, ignored */
    {"user", CH}, {"metadata", CH}, {"store", CH}, {"service_tier", CH}, {"parallel_tool_calls", H},
    {"prediction", H},
};
enum { N_KNOWN = sizeof known_fields / sizeof *known_fields };

static bool check_known_fields(cJSON *j, bool chat, verr *v) {
    bool seen[N_KNOWN] = {0};
    cJSON *f;
    cJSON_ArrayForEach(f, j) {
        int k = 0;
        while (k < N_KNOWN && strcmp(known_fields[k].name, f->string)) k++;
        if (k == N_KNOWN) {
            v->code = "unknown_field";
            return srv_bad(v, f->string, "unrecognized request argument supplied: '%.64s' (README, \"Request fields\", "
                       "lists what kvant takes)", f->string);
        }
        if (!(known_fields[k].where & (chat ? H : C))) {
            v->code = "unknown_field";
            return srv_bad(v, known_fields[k].name, "'%s' is a field of %s, not of %s", known_fields[k].name,
                       chat ? "/v1/completions" : "/v1/chat/completions",
                       chat ? "/v1/chat/completions" : "/v1/completions");
        }
        if (seen[k]) return srv_bad(v, known_fields[k].name, "'%s' is given twice", known_fields[k].name);
        seen[k] = true;
    }
    return true;
}

/* ==== NOT SUPPORTED YET: strict arguments without a forced call ==============
 * Refused here, by name, with a 400 - never ignored, since ignoring it would
 * hand back arguments that need not match the schema as if they did.
 *   tools[i].function.strict: true with tool_choice "auto" (the default):
 *                    holding the arguments to the schema needs a grammar
 *                    over the reply, and a grammar that admits both text and
 *                    a call is not built yet.  With tool_choice "required"
 *                    or a named function the call is forced and held to its
 *                    schema (parse_tool_choice), which is what strict asks;
 *                    with "none" no call is read, so strict holds.
 * The tool_choice values themselves are checked here; "none" and "auto" are
 * honoured by parse_messages / render.c, "required" and a named function
 * by parse_tool_choice (kvant_chat_tool_grammar). */
static bool tool_choice_forces(cJSON *j) {
    cJSON *f = field(j, "tool_choice");
    return f && !(cJSON_IsString(f) && (!strcmp(f->valuestring, "none") || !strcmp(f->valuestring, "auto")));
}

static bool refuse_structured(cJSON *j, bool chat, verr *v) {
    cJSON *f;
    if (!chat) return true;
    if ((f = field(j, "tool_choice"))) {
        cJSON *type = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL,
              *fn = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "function") : NULL,
              *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        const bool named = cJSON_IsString(type) && !strcmp(type->valuestring, "function") && cJSON_IsString(name);
        if (!named && (!cJSON_IsString(f) || (strcmp(f->valuestring, "none") && strcmp(f->valuestring, "auto") &&
                                              strcmp(f->valuestring, "required"))))
            return srv_bad(v, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                                         "\"function\", \"function\": {\"name\": \"...\"}}");
    }
    const bool none = cJSON_IsString(f) && !strcmp(f->valuestring, "none");
    cJSON *tools = field(j, "tools"), *t;
    int i = 0;
    if (!tool_choice_forces(j) && !none && cJSON_IsArray(tools)) cJSON_ArrayForEach(t, tools) {
        cJSON *tf = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "function") : NULL;
        if (cJSON_IsObject(tf) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tf, "strict")))
            return srv_bad(v, "tools", "tools[%d].function.strict: true is enforced only when tool_choice forces a call "
                       "(\"required\" or {\"type\": \"function\", ...}): with \"auto\" the model may answer in "
                       "text, and kvant cannot hold a call it chooses to write to the schema (not supported yet)", i);
        i++;
    }
    return true;
}
/* ==== end of NOT SUPPORTED YET ================================================== */

/* ---- structured outputs: response_format, grammar, json_schema -------------------
 *   response_format  {"type": "text"} (nothing to constrain), {"type":
 *                    "json_object"} (any JSON object), {"type": "json_schema",
 *                    "json_schema": {"name" (required, [a-zA-Z0-9_-]{1,64},
 *                    as OpenAI), "description"?, "schema"? (an object; absent:
 *                    any JSON value), "strict"? (a boolean, accepted: kvant
 *                    always holds the reply to the schema)}}
 *   grammar          llama.cpp's: a GBNF string (rule "root")
 *   json_schema      llama.cpp's: a schema object at the top level
 * At most one of them asks for a constraint (a 400 names the second, in
 * the body's order).  The grammar is compiled here, in the request's
 * thread (~0.3 ms for a schema; the model's first builds its vocabulary for
 * the grammar engine once), and handed to the request (p->req.grammar; the
 * engine takes its own reference at submission, srv_parsed_free drops this
 * one).  One kvant cannot compile is a 400 naming the field, with the
 * compiler's message (the JSON Schema keyword and its place). */
static bool check_schema_name(cJSON *js, verr *v) {
    cJSON *f;
    cJSON_ArrayForEach(f, js) if (strcmp(f->string, "name") && strcmp(f->string, "description") &&
                                  strcmp(f->string, "schema") && strcmp(f->string, "strict"))
        return srv_bad(v, "response_format", "response_format.json_schema: unrecognized field '%.64s' (it takes name, "
                   "description, schema, strict)", f->string);
    cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (!cJSON_IsString(name))
        return srv_bad(v, "response_format", "response_format.json_schema.name is required (a string)");
    size_t len = 0;
    for (const char *c = name->valuestring; *c; c++, len++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '-'))
            len = 100;
    if (!len || len > 64)
        return srv_bad(v, "response_format", "response_format.json_schema.name '%.80s' must be 1 to 64 of a-z, A-Z, 0-9, "
                   "_ and -", name->valuestring);
    if ((f = field(js, "description")) && !cJSON_IsString(f))
        return srv_bad(v, "response_format", "response_format.json_schema.description must be a string");
    if ((f = field(js, "strict")) && !cJSON_IsBool(f))
        return srv_bad(v, "response_format", "response_format.json_schema.strict must be a boolean");
    if ((f = field(js, "schema")) && !cJSON_IsObject(f))
        return srv_bad(v, "response_format", "response_format.json_schema.schema must be an object (a JSON Schema)");
    return true;
}

static bool parse_structured(srv *s, cJSON *j, parsed *p, verr *v) {
    const char *param = NULL, *where = NULL; /* the field that asks, and the place of its text, for messages */
    kvant_grammar_kind kind = KVANT_GRAMMAR_JSON_OBJECT;
    cJSON *src = NULL; /* the schema object or the GBNF string */
    cJSON *f;
    cJSON_ArrayForEach(f, j) {
        const char *k = f->string, *w = k;
        kvant_grammar_kind kk;
        cJSON *sv = NULL;
        if (cJSON_IsNull(f)) continue;
        if (!strcmp(k, "response_format")) {
            cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
            if (!cJSON_IsString(t))
                return srv_bad(v, k, "'response_format' must be an object with a string 'type' (text, json_object or "
                           "json_schema)");
            const char *type = t->valuestring;
            const bool is_schema = !strcmp(type, "json_schema");
            if (strcmp(type, "text") && strcmp(type, "json_object") && !is_schema)
                return srv_bad(v, k, "response_format type '%.32s' is none of text, json_object, json_schema", type);
            cJSON *e;
            cJSON_ArrayForEach(e, f) if (strcmp(e->string, "type") && !(is_schema && !strcmp(e->string, "json_schema")))
                return srv_bad(v, k, "response_format of type %s: unrecognized field '%.64s'", type, e->string);
            if (!strcmp(type, "text")) continue;
            kk = KVANT_GRAMMAR_JSON_OBJECT;
            if (is_schema) {
                cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
                if (!cJSON_IsObject(js))
                    return srv_bad(v, k, "response_format of type json_schema needs a 'json_schema' object ({\"name\", "
                               "\"schema\"})");
                if (!check_schema_name(js, v)) return false;
                kk = KVANT_GRAMMAR_JSON_SCHEMA, sv = field(js, "schema"), w = "response_format.json_schema.schema";
            }
        } else if (!strcmp(k, "grammar")) {
            if (!cJSON_IsString(f)) return srv_bad(v, k, "'grammar' must be a string (GBNF, as llama.cpp takes it)");
            kk = KVANT_GRAMMAR_GBNF, sv = f;
        } else if (!strcmp(k, "json_schema")) {
            if (!cJSON_IsObject(f)) return srv_bad(v, k, "'json_schema' must be an object (a JSON Schema)");
            kk = KVANT_GRAMMAR_JSON_SCHEMA, sv = f;
        } else {
            continue;
        }
        if (param)
            return srv_bad(v, k, "'%s' and '%s' both constrain the output; give one of response_format, grammar and "
                       "json_schema", param, k);
        param = k, where = w, kind = kk, src = sv;
    }
    if (!param) return true;
    if (kind == KVANT_GRAMMAR_JSON_SCHEMA && src && deeper_than(src, SRV_MAX_SCHEMA_DEPTH))
        return srv_bad(v, param, "%s nests deeper than %d levels", where, SRV_MAX_SCHEMA_DEPTH);
    char *text = kind == KVANT_GRAMMAR_JSON_SCHEMA && src ? cJSON_PrintUnformatted(src) : NULL;
    if (kind == KVANT_GRAMMAR_JSON_SCHEMA && src && !text) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    const char *t = kind == KVANT_GRAMMAR_GBNF ? src->valuestring : text;
    if (t && strlen(t) > SRV_MAX_GRAMMAR_BYTES) {
        const size_t len = strlen(t);
        cJSON_free(text);
        return srv_bad(v, param, "%s has %zu bytes%s; at most %d", where, len,
                       kind == KVANT_GRAMMAR_GBNF ? "" : " as compact JSON", SRV_MAX_GRAMMAR_BYTES);
    }
    kvant_status st;
    p->req.grammar = kvant_grammar_new(s->m, kind, t, t ? strlen(t) : 0, &st);
    cJSON_free(text);
    if (p->req.grammar) return true;
    if (st.code == KVANT_ERR_NOMEM) v->status = 500;
    v->code = st.code == KVANT_ERR_UNSUPPORTED ? "unsupported_schema" : kind == KVANT_GRAMMAR_GBNF ? "invalid_grammar"
                                                                                                : "invalid_schema";
    return srv_bad(v, param, "%s: %s", where, st.msg);
}

/* Fields that exist but whose feature kvant lacks (not the grammar's). */
static bool refuse_unsupported(cJSON *j, bool chat, verr *v) {
    cJSON *f;
    if (!chat) {
        if ((f = field(j, "suffix")) && !cJSON_IsString(f)) return srv_bad(v, "suffix", "'suffix' must be a string");
        if (f && f->valuestring[0])
            return srv_bad(v, "suffix", "suffix is not supported (no fill-in-the-middle: kvant's models have no "
                                    "insertion tokens)");
        return true;
    }
    /* OpenAI's deprecated function calling: [] and "none" ask for nothing */
    if ((f = field(j, "functions")) && !(cJSON_IsArray(f) && !cJSON_GetArraySize(f)))
        return srv_bad(v, "functions", "'functions' (deprecated by OpenAI) is not supported: use 'tools'");
    if ((f = field(j, "function_call")) && !(cJSON_IsString(f) && !strcmp(f->valuestring, "none")))
        return srv_bad(v, "function_call", "'function_call' (deprecated by OpenAI) is not supported: use 'tool_choice'");
    if ((f = field(j, "modalities"))) {
        if (!cJSON_IsArray(f)) return srv_bad(v, "modalities", "'modalities' must be an array of strings");
        cJSON *e;
        cJSON_ArrayForEach(e, f) if (!cJSON_IsString(e) || strcmp(e->valuestring, "text"))
            return srv_bad(v, "modalities", "modalities other than \"text\" are not supported");
    }
    if (field(j, "audio")) return srv_bad(v, "audio", "audio output is not supported");
    if ((f = field(j, "reasoning_effort")))
        return srv_bad(v, "reasoning_effort", "reasoning_effort is not supported (the chat templates have no "
                                          "reasoning control; qwen3's is --chat-template qwen3-no-think)");
    if (field(j, "web_search_options")) return srv_bad(v, "web_search_options", "web search is not supported");
    return true;
}

/* user, metadata, store, service_tier, parallel_tool_calls, prediction:
 * checked for their type, then ignored (none changes the text) */
static bool check_annotations(cJSON *j, verr *v) {
    cJSON *f;
    if ((f = field(j, "user")) && !cJSON_IsString(f)) return srv_bad(v, "user", "'user' must be a string");
    if ((f = field(j, "metadata"))) {
        if (!cJSON_IsObject(f)) return srv_bad(v, "metadata", "'metadata' must be an object of strings");
        cJSON *e;
        cJSON_ArrayForEach(e, f) if (!cJSON_IsString(e))
            return srv_bad(v, "metadata", "'metadata' must be an object of strings");
    }
    bool b;
    if (!get_bool(j, "store", &b, v) || !get_bool(j, "parallel_tool_calls", &b, v)) return false;
    if ((f = field(j, "service_tier"))) {
        static const char *const tiers[] = {"auto", "default", "flex", "scale", "priority"};
        bool ok = false;
        for (int i = 0; i < 5 && cJSON_IsString(f); i++) ok |= !strcmp(f->valuestring, tiers[i]);
        if (!ok) return srv_bad(v, "service_tier", "'service_tier' must be one of auto, default, flex, scale, priority");
    }
    if ((f = field(j, "prediction")) && !cJSON_IsObject(f))
        return srv_bad(v, "prediction", "'prediction' must be an object");
    return true;
}

/* "logit_bias": {"<token id>": bias in [-100, 100], ...} */
static bool parse_logit_bias(srv *s, cJSON *j, parsed *p, verr *v) {
    cJSON *lb = field(j, "logit_bias");
    if (!lb) return true;
    if (!cJSON_IsObject(lb)) return srv_bad(v, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    const int n = cJSON_GetArraySize(lb);
    if (n > SRV_MAX_LOGIT_BIAS)
        return srv_bad(v, "logit_bias", "'logit_bias' has %d entries; at most %d", n, SRV_MAX_LOGIT_BIAS);
    if (!n) return true;
    if (!(p->bias = malloc((size_t)n * sizeof *p->bias))) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, lb) {
        const char *key = e->string;
        char *end;
        const long id = strtol(key, &end, 10);
        if (!key[0] || *end || key[0] < '0' || key[0] > '9' || id < 0 || id >= s->info.vocab_size)
            return srv_bad(v, "logit_bias", "logit_bias keys must be token ids in [0, %d) as strings, got '%.32s'",
                       s->info.vocab_size, key);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
            return srv_bad(v, "logit_bias", "logit_bias values must be numbers in [-100, 100] (token %ld)", id);
        for (int i = 0; i < k; i++)
            if (p->bias[i].token == (int32_t)id) return srv_bad(v, "logit_bias", "logit_bias names token %ld twice", id);
        p->bias[k++] = (kvant_logit_bias){(int32_t)id, (float)e->valuedouble};
    }
    p->req.sampling.logit_bias = p->bias;
    p->req.sampling.n_logit_bias = k;
    return true;
}

/* "stop": a string or an array of up to SRV_MAX_STOPS strings */
static bool parse_stop(cJSON *j, parsed *p, verr *v) {
    cJSON *stop = field(j, "stop");
    if (!stop) return true;
    cJSON *one = cJSON_IsString(stop) ? stop : NULL;
    if (!one && !cJSON_IsArray(stop)) return srv_bad(v, "stop", "'stop' must be a string or an array of strings");
    const int n = one ? 1 : cJSON_GetArraySize(stop);
    if (n > SRV_MAX_STOPS) return srv_bad(v, "stop", "at most %d stop strings (got %d)", SRV_MAX_STOPS, n);
    for (int i = 0; i < n; i++) {
        cJSON *e = one ? one : cJSON_GetArrayItem(stop, i);
        if (!cJSON_IsString(e)) return srv_bad(v, "stop", "'stop' must be a string or an array of strings");
        const size_t len = strlen(e->valuestring);
        if (!len || len > SRV_MAX_STOP_LEN)
            return srv_bad(v, "stop", "stop strings must have 1 to %d bytes", SRV_MAX_STOP_LEN);
        if (!(p->stops[p->n_stops] = strdup(e->valuestring))) {
            v->status = 500;
            return srv_bad(v, NULL, "out of memory");
        }
        p->n_stops++;
    }
    return true;
}

static bool parse_common(srv *s, cJSON *j, bool chat, parsed *p, verr *v) {
    if (!check_known_fields(j, chat, v) || !refuse_structured(j, chat, v) || !refuse_unsupported(j, chat, v) ||
        !check_annotations(j, v))
        return false;
    double x;
    kvant_sampling *sp = &p->req.sampling;
    *sp = kvant_sampling_default();
    sp->temperature = 1.0f, sp->top_k = 0, sp->top_p = 1.0f, sp->min_p = 0.0f, sp->repeat_penalty = 1.0f;
    sp->seed = (uint64_t)time(NULL) * 6364136223846793005ULL + __atomic_add_fetch(&s->seed_ctr, 1, __ATOMIC_RELAXED);
    p->req.n = 1;
    p->logprobs = -1;
    /* length: max_completion_tokens is chat's newer name for max_tokens */
    double mt = -1, mct = -1;
    if (!get_num(j, "max_tokens", 1, 1e9, true, &mt, v)) return false;
    if (chat && !get_num(j, "max_completion_tokens", 1, 1e9, true, &mct, v)) return false;
    if (mt > 0 && mct > 0 && mt != mct)
        return srv_bad(v, "max_completion_tokens", "max_tokens (%g) and max_completion_tokens (%g) differ; give one",
                   mt, mct);
    x = mt > 0 ? mt : mct;
    p->max_name = mt > 0 || mct <= 0 ? "max_tokens" : "max_completion_tokens";
    if (x > 0) p->req.max_tokens = (int)x, p->has_max_tokens = true;
    /* sampling */
    x = sp->temperature;
    if (!get_num(j, "temperature", 0, 2, false, &x, v)) return false;
    sp->temperature = (float)x;
    double top_p = 1;
    if (!get_num(j, "top_p", 0, 1, false, &top_p, v)) return false;
    sp->top_p = top_p > 0 ? (float)top_p : 1.0f;
    x = 0;
    if (!get_num(j, "top_k", -1, 1e6, true, &x, v)) return false;
    sp->top_k = x > 0 ? (int)x : 0;
    if (top_p == 0) sp->top_k = 1; /* the smallest nucleus: the most likely token alone */
    x = 0;
    if (!get_num(j, "min_p", 0, 1, false, &x, v)) return false;
    sp->min_p = (float)x;
    if (field(j, "repeat_penalty") && field(j, "repetition_penalty"))
        return srv_bad(v, "repetition_penalty", "give one of repeat_penalty (llama.cpp's name) and repetition_penalty "
                                            "(vLLM's)");
    x = 1;
    if (!get_num(j, "repetition_penalty", 0.01, 10, false, &x, v) ||
        !get_num(j, "repeat_penalty", 0.01, 10, false, &x, v))
        return false;
    sp->repeat_penalty = (float)x;
    x = sp->repeat_last_n;
    if (!get_num(j, "repeat_last_n", -1, 1 << 16, true, &x, v)) return false;
    sp->repeat_last_n = x < 0 ? (s->max_ctx < (1 << 16) ? s->max_ctx : 1 << 16) : (int)x; /* -1: the context */
    x = 0;
    if (!get_num(j, "presence_penalty", -2, 2, false, &x, v)) return false;
    sp->presence_penalty = (float)x;
    x = 0;
    if (!get_num(j, "frequency_penalty", -2, 2, false, &x, v)) return false;
    sp->frequency_penalty = (float)x;
    x = -1;
    if (!get_num(j, "seed", -9.2e18, 9.2e18, true, &x, v)) return false;
    if (x != -1) sp->seed = (uint64_t)(int64_t)x;
    if (!parse_logit_bias(s, j, p, v)) return false;
    /* samples: n returned, best_of generated (completions) */
    x = 1;
    if (!get_num(j, "n", 1, SRV_MAX_N, true, &x, v)) return false;
    p->n_return = (int)x;
    x = p->n_return;
    if (!get_num(j, "best_of", 1, SRV_MAX_N, true, &x, v)) return false;
    if (x < p->n_return) return srv_bad(v, "best_of", "best_of (%g) must be at least n (%d)", x, p->n_return);
    p->req.n = (int)x;
    if (!get_bool(j, "stream", &p->stream, v)) return false;
    if (p->stream && p->req.n > p->n_return)
        return srv_bad(v, "best_of", "best_of > n cannot be streamed (the best are known only at the end)");
    if (!get_bool(j, "ignore_eos", &p->req.ignore_eos, v)) return false;
    cJSON *so = field(j, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return srv_bad(v, "stream_options", "'stream_options' must be an object");
        cJSON *f;
        cJSON_ArrayForEach(f, so) if (strcmp(f->string, "include_usage"))
            return srv_bad(v, "stream_options", "unrecognized stream_options field '%.64s' (kvant takes include_usage)",
                       f->string);
        if (!get_bool(so, "include_usage", &p->include_usage, v)) return false;
    }
    /* logprobs: chat's is a boolean + top_logprobs, completions' a count */
    if (chat) {
        bool lp = false;
        if (!get_bool(j, "logprobs", &lp, v)) return false;
        x = 0;
        if (!get_num(j, "top_logprobs", 0, KVANT_MAX_LOGPROBS, true, &x, v)) return false;
        if (field(j, "top_logprobs") && !lp)
            return srv_bad(v, "top_logprobs", "top_logprobs needs logprobs: true");
        if (lp) p->logprobs = (int)x;
    } else {
        x = -1;
        if (!get_num(j, "logprobs", 0, KVANT_MAX_LOGPROBS, true, &x, v)) return false;
        p->logprobs = (int)x;
        if (!get_bool(j, "echo", &p->echo, v)) return false;
        if (p->echo && p->logprobs >= 0)
            return srv_bad(v, "echo", "echo with logprobs is not supported (the prompt's logprobs are not computed)");
    }
    if (p->logprobs >= 0) p->req.logprobs = p->logprobs > 0 ? p->logprobs : 1;
    if (p->req.n > p->n_return && !p->req.logprobs) p->req.logprobs = 1; /* best_of ranks by them */
    if (!parse_stop(j, p, v)) return false;
    cJSON *model = field(j, "model");
    if (model && !cJSON_IsString(model)) return srv_bad(v, "model", "'model' must be a string");
    return parse_structured(s, j, p, v); /* last: the cheap checks first */
}

static bool parse_prompt(srv *s, cJSON *j, parsed *p, verr *v) {
    cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (!pr) return srv_bad(v, "prompt", "'prompt' is required");
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && !cJSON_IsNumber(cJSON_GetArrayItem(pr, 0)))
        pr = cJSON_GetArrayItem(pr, 0); /* ["text"] or [[ids]] */
    if (cJSON_IsString(pr)) {
        if (!pr->valuestring[0]) return srv_bad(v, "prompt", "'prompt' is empty");
        p->text = strdup(pr->valuestring);
        return true;
    }
    if (cJSON_IsArray(pr)) {
        const int n = cJSON_GetArraySize(pr);
        if (!n) return srv_bad(v, "prompt", "'prompt' is empty");
        if (cJSON_IsString(cJSON_GetArrayItem(pr, 0)) || cJSON_IsArray(cJSON_GetArrayItem(pr, 0)))
            return srv_bad(v, "prompt", "one prompt per request (got %d)", n);
        if (n > s->max_ctx) return srv_bad(v, "prompt", "the prompt has %d tokens; the context holds %d", n, s->max_ctx);
        p->ids = malloc((size_t)n * sizeof *p->ids);
        if (!p->ids) return srv_bad(v, "prompt", "out of memory");
        /* the range before the cast: (int) of a double past INT_MAX is undefined (the fuzzer's
         * 4666666666666666603); one walk of the list, not cJSON_GetArrayItem's walk per id */
        int i = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, pr) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < s->info.vocab_size) ||
                e->valuedouble != (double)(int)e->valuedouble)
                return srv_bad(v, "prompt", "prompt token ids must be integers in [0, %d); prompt[%d] is not",
                               s->info.vocab_size, i);
            p->ids[i++] = (int32_t)e->valuedouble;
        }
        p->n_ids = n;
        return true;
    }
    return srv_bad(v, "prompt", "'prompt' must be a string, an array of token ids or an array of one string");
}

/* ---- messages and tools ------------------------------------------------------------
 * One reader for /v1/chat/completions and /apply-template, so the prompt
 * /apply-template shows is the one the chat endpoint tokenizes.  A message:
 *   role          system, developer (as system), user, assistant, tool; "function"
 *                 (OpenAI's deprecated tool role) is refused by name
 *   content       a string or text parts; null or absent only beside tool_calls
 *   tool_calls    assistant: [{"id", "type": "function", "function": {"name",
 *                 "arguments" (a JSON text, as OpenAI sends it)}}]
 *   tool_call_id  tool: required, as OpenAI requires it
 *   name          tool only (kept; the other roles' templates have no place for
 *                 it, so it is refused there rather than dropped)
 *   function_call (deprecated) is refused.
 * tools: [{"type": "function", "function": {"name" ([a-zA-Z0-9_-]{1,64}),
 * "description"?, "parameters"? (an object), "strict"?}}], checked as OpenAI
 * checks them; they and the calls go to kvant_chat_render_tools as JSON
 * text, which each family renders in its own format (README "Tool calls").
 * Other keys of a tool are not refused: they are not dropped but rendered
 * with it, as the templates do (Qwen's writes the whole tool, Mistral's
 * leaves out "return"). */
static bool check_tools(cJSON *tools, verr *v) {
    if (!cJSON_IsArray(tools)) return srv_bad(v, "tools", "'tools' must be an array");
    const int n = cJSON_GetArraySize(tools);
    if (n > SRV_MAX_TOOLS) return srv_bad(v, "tools", "'tools' has %d tools; at most %d", n, SRV_MAX_TOOLS);
    int i = 0;
    cJSON *t, *f;
    cJSON_ArrayForEach(t, tools) {
        if (!cJSON_IsObject(t)) return srv_bad(v, "tools", "tools[%d] must be an object", i);
        cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return srv_bad(v, "tools", "tools[%d].type must be \"function\"", i);
        if (!cJSON_IsObject(fn)) return srv_bad(v, "tools", "tools[%d].function must be an object", i);
        cJSON_ArrayForEach(f, fn) { /* other keys go to the template with the rest (Mistral's leaves out "return") */
            if (!strcmp(f->string, "description") && !cJSON_IsString(f) && !cJSON_IsNull(f))
                return srv_bad(v, "tools", "tools[%d].function.description must be a string", i);
            if (!strcmp(f->string, "parameters") && !cJSON_IsObject(f) && !cJSON_IsNull(f))
                return srv_bad(v, "tools", "tools[%d].function.parameters must be an object (a JSON Schema)", i);
            if (!strcmp(f->string, "parameters") && deeper_than(f, SRV_MAX_SCHEMA_DEPTH))
                return srv_bad(v, "tools", "tools[%d].function.parameters nests deeper than %d levels", i,
                               SRV_MAX_SCHEMA_DEPTH);
            if (!strcmp(f->string, "strict") && !cJSON_IsBool(f) && !cJSON_IsNull(f))
                return srv_bad(v, "tools", "tools[%d].function.strict must be a boolean", i);
        }
        cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name)) return srv_bad(v, "tools", "tools[%d].function.name is required (a string)", i);
        const char *s = name->valuestring;
        size_t len = 0;
        while (s[len] && ((s[len] >= 'a' && s[len] <= 'z') || (s[len] >= 'A' && s[len] <= 'Z') ||
                          (s[len] >= '0' && s[len] <= '9') || s[len] == '_' || s[len] == '-'))
            len++;
        if (!len || s[len] || len > 64)
            return srv_bad(v, "tools", "tools[%d].function.name '%.80s' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i, s);
        for (int k = 0; k < i; k++)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, k),
                                                                                          "function"), "name")->valuestring, s))
                return srv_bad(v, "tools", "tools[%d].function.name '%s' is tools[%d]'s too", i, s, k);
        i++;
    }
    return true;
}

/* an assistant message's tool_calls (messages[i]) */
static bool check_tool_calls(cJSON *tc, int i, verr *v) {
    if (!cJSON_IsArray(tc)) return srv_bad(v, "messages", "messages[%d]: tool_calls is not a JSON array of objects", i);
    int k = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id"), *type = cJSON_GetObjectItemCaseSensitive(c, "type"),
              *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsObject(c)) return srv_bad(v, "messages", "messages[%d].tool_calls[%d] must be an object", i, k);
        if (!cJSON_IsString(id)) return srv_bad(v, "messages", "messages[%d].tool_calls[%d].id must be a string", i, k);
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return srv_bad(v, "messages", "messages[%d].tool_calls[%d].type must be \"function\"", i, k);
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name))
            return srv_bad(v, "messages", "messages[%d].tool_calls[%d].function.name must be a string", i, k);
        if (!cJSON_IsString(args))
            return srv_bad(v, "messages", "messages[%d].tool_calls[%d].function.arguments must be a string (the JSON text "
                       "of the arguments, as OpenAI sends it)", i, k);
        k++;
    }
    return true;
}

/* a message's content: a string, or text parts joined (*own: the joined copy) */
static bool message_text(cJSON *content, int i, char **own, const char **out, verr *v) {
    if (cJSON_IsString(content)) {
        *out = content->valuestring;
        return true;
    }
    if (!cJSON_IsArray(content)) return srv_bad(v, "messages", "messages[%d] needs a string 'content'", i);
    size_t len = 0; /* [{"type":"text","text":...}, ...] */
    cJSON *part;
    cJSON_ArrayForEach(part, content) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text"), *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "text"))
            return srv_bad(v, "messages", "messages[%d]: content parts of type '%.32s' are not supported (text only)", i,
                       type->valuestring);
        if (!cJSON_IsString(t)) return srv_bad(v, "messages", "messages[%d]: only text content parts are supported", i);
        len += strlen(t->valuestring);
    }
    char *buf = *own = malloc(len + 1);
    if (!buf) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    buf[0] = 0;
    cJSON_ArrayForEach(part, content) strcat(buf, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
    *out = buf;
    return true;
}

/* messages[i] = m -> *out (*own: joined text parts, *calls: the tool_calls'
 * JSON text; the caller frees both); *any when it says something */
static bool read_message(cJSON *m, int i, kvant_chat_msg *out, char **own, char **calls, bool *any, verr *v) {
    cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
    if (!cJSON_IsString(role)) return srv_bad(v, "messages", "messages[%d] needs a string 'role'", i);
    const char *r = role->valuestring;
    if (!strcmp(r, "function"))
        return srv_bad(v, "messages", "messages[%d]: role 'function' (deprecated by OpenAI) is not supported: use role "
                   "'tool' with tool_call_id", i);
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "developer") &&
        strcmp(r, "tool"))
        return srv_bad(v, "messages", "messages[%d]: unknown role '%.32s'", i, r);
    const bool tool = !strcmp(r, "tool"), assistant = !strcmp(r, "assistant");
    cJSON *f;
    cJSON_ArrayForEach(f, m) {
        const char *k = f->string;
        if (cJSON_IsNull(f) || !strcmp(k, "role") || !strcmp(k, "content")) continue;
        if ((assistant && !strcmp(k, "tool_calls")) || (tool && (!strcmp(k, "tool_call_id") || !strcmp(k, "name"))))
            continue;
        if (!strcmp(k, "function_call"))
            return srv_bad(v, "messages", "messages[%d].function_call (deprecated by OpenAI) is not supported: use "
                       "tool_calls", i);
        if (!strcmp(k, "name"))
            return srv_bad(v, "messages", "messages[%d].name is not supported (the chat templates do not render it)",
                       i);
        if (!strcmp(k, "tool_calls"))
            return srv_bad(v, "messages", "messages[%d].tool_calls: only assistant messages carry tool calls", i);
        if (!strcmp(k, "tool_call_id"))
            return srv_bad(v, "messages", "messages[%d].tool_call_id: only tool messages answer a call", i);
        return srv_bad(v, "messages", "messages[%d]: unrecognized field '%.64s'", i, k);
    }
    cJSON *content = field(m, "content"), *tc = field(m, "tool_calls"), *id = field(m, "tool_call_id"),
          *name = field(m, "name");
    if (tc && !check_tool_calls(tc, i, v)) return false;
    const bool has_calls = tc && cJSON_GetArraySize(tc) > 0;
    if (tool && !cJSON_IsString(id))
        return srv_bad(v, "messages", "messages[%d]: a tool message needs a string 'tool_call_id' (the id of the call it "
                   "answers)", i);
    if (name && !cJSON_IsString(name)) return srv_bad(v, "messages", "messages[%d].name must be a string", i);
    *out = (kvant_chat_msg){strcmp(r, "developer") ? r : "system", NULL, NULL, id ? id->valuestring : NULL,
                            name ? name->valuestring : NULL};
    if (content) {
        if (!message_text(content, i, own, &out->content, v)) return false;
    } else if (!has_calls) {
        return srv_bad(v, "messages", "messages[%d] needs a string 'content'", i);
    }
    if (tc && !(out->tool_calls_json = *calls = cJSON_PrintUnformatted(tc))) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    if ((out->content && out->content[0]) || has_calls) *any = true;
    return true;
}

/* messages and tools -> p->text, the prompt; chat: p->tool_calls when the
 * replies are to be read for calls (tools given, tool_choice not "none":
 * "none" still renders the tools, as OpenAI's model still sees them, and
 * the reply is then content whatever it holds) */
static bool parse_messages(srv *s, cJSON *j, parsed *p, verr *v, bool add_assistant) {
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "messages"), *tools = field(j, "tools");
    if (!ms) return srv_bad(v, "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return srv_bad(v, "messages", "'messages' must be an array");
    const int n = cJSON_GetArraySize(ms);
    if (!n) return srv_bad(v, "messages", "'messages' is empty");
    if (n > SRV_MAX_MESSAGES) return srv_bad(v, "messages", "'messages' has %d messages; at most %d", n, SRV_MAX_MESSAGES);
    if (tools && !check_tools(tools, v)) return false;
    kvant_chat_msg *msg = calloc((size_t)n, sizeof *msg);
    char **own = calloc((size_t)n, sizeof *own), **calls = calloc((size_t)n, sizeof *calls);
    char *tools_json = tools ? cJSON_PrintUnformatted(tools) : NULL;
    bool ok = msg && own && calls && (!tools || tools_json), any = false;
    if (!ok) v->status = 500, srv_bad(v, NULL, "out of memory");
    for (int i = 0; ok && i < n; i++) ok = read_message(cJSON_GetArrayItem(ms, i), i, &msg[i], &own[i], &calls[i], &any, v);
    if (ok && !any) ok = srv_bad(v, "messages", "every message is empty");
    kvant_status st;
    if (ok && !(p->text = kvant_chat_render_tools(s->chat_kind, msg, n, tools_json, add_assistant, &st))) {
        if (st.code == KVANT_ERR_NOMEM) v->status = 500;
        ok = srv_bad(v, "messages", "%s", st.msg);
    }
    cJSON *tc = field(j, "tool_choice");
    p->tool_calls = ok && tools && cJSON_GetArraySize(tools) > 0 &&
                    !(cJSON_IsString(tc) && !strcmp(tc->valuestring, "none"));
    for (int i = 0; i < n; i++) {
        if (own) free(own[i]);
        if (calls) cJSON_free(calls[i]);
    }
    cJSON_free(tools_json);
    free(calls);
    free(own);
    free(msg);
    return ok;
}

/* tool_choice "required" / {"type": "function", "function": {"name"}}: the
 * reply is held to a call of one of the tools (that one), with arguments
 * matching its parameters schema, in the family's format
 * (kvant_chat_tool_grammar); render.c then reads it as with "auto".  Needs
 * tools; the call's grammar is the request's one constraint, so
 * response_format / grammar / json_schema beside it are refused. */
static bool parse_tool_choice(srv *s, cJSON *j, parsed *p, verr *v) {
    if (!tool_choice_forces(j)) return true;
    cJSON *tc = field(j, "tool_choice"), *tools = field(j, "tools");
    cJSON *name = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(
                                           cJSON_GetObjectItemCaseSensitive(tc, "function"), "name")
                                     : NULL;
    if (!cJSON_IsArray(tools) || !cJSON_GetArraySize(tools))
        return srv_bad(v, "tool_choice", "tool_choice %s needs tools to call; 'tools' is %s",
                   name ? "naming a function" : "\"required\"", tools ? "empty" : "absent");
    if (p->req.grammar)
        return srv_bad(v, "tool_choice", "tool_choice %s holds the reply to a tool call, and response_format / grammar / "
                   "json_schema constrain it too; give one", name ? "naming a function" : "\"required\"");
    char *tools_json = cJSON_PrintUnformatted(tools);
    if (!tools_json) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    if (strlen(tools_json) > SRV_MAX_GRAMMAR_BYTES) { /* their schemas become the call's grammar */
        const size_t len = strlen(tools_json);
        cJSON_free(tools_json);
        return srv_bad(v, "tools", "tool_choice forces a call, and the tools' JSON has %zu bytes; at most %d are "
                       "compiled to a grammar", len, SRV_MAX_GRAMMAR_BYTES);
    }
    kvant_status st;
    int bad_tool = -1;
    p->req.grammar = kvant_chat_tool_grammar(s->m, s->chat_kind, tools_json, name ? name->valuestring : NULL,
                                             &bad_tool, &st);
    cJSON_free(tools_json);
    if (p->req.grammar) return true;
    if (st.code == KVANT_ERR_NOMEM) v->status = 500;
    if (bad_tool >= 0) {
        v->code = st.code == KVANT_ERR_UNSUPPORTED ? "unsupported_schema" : "invalid_schema";
        return srv_bad(v, "tools", "%s", st.msg);
    }
    if (st.code == KVANT_ERR_UNSUPPORTED)
        return srv_bad(v, "tool_choice", "tool_choice %s is not supported with the chat template %s: %s",
                   name ? "naming a function" : "\"required\"", kvant_chat_template_name(s->chat_kind), st.msg);
    return srv_bad(v, "tool_choice", "tool_choice: %s", st.msg);
}

/* the prompt's tokens (BOS first; chat: special tokens too, BOS not
 * doubled), the context-length checks and the max_tokens default */
static bool prepare_prompt(srv *s, bool chat, parsed *p, verr *v) {
    int n_prompt = p->n_ids;
    if (p->text) { /* more than the context is an error */
        p->tok = malloc((size_t)(s->max_ctx + 1) * sizeof *p->tok);
        if (!p->tok) {
            v->status = 500;
            return srv_bad(v, NULL, "out of memory");
        }
        n_prompt = chat ? kvant_chat_tokenize(s->m, p->text, strlen(p->text), p->tok, s->max_ctx + 1)
                        : kvant_tokenize(s->m, p->text, strlen(p->text), true, p->tok, s->max_ctx + 1);
        if (n_prompt == INT_MIN) {
            v->status = 500;
            return srv_bad(v, NULL, "out of memory");
        }
        if (n_prompt < 0) n_prompt = -n_prompt;
    } else
        p->tok = p->ids, p->ids = NULL;
    p->n_prompt = n_prompt;
    if (n_prompt >= s->max_ctx) {
        v->code = "context_length_exceeded";
        return srv_bad(v, chat ? "messages" : "prompt",
                   "the prompt has %d tokens; the context holds %d, with room for at least one new token", n_prompt,
                   s->max_ctx);
    }
    if (!p->has_max_tokens) {
        const int def = chat ? s->max_ctx : s->p.default_max_tokens;
        p->req.max_tokens = s->max_ctx - n_prompt < def ? s->max_ctx - n_prompt : def;
    } else if (n_prompt + p->req.max_tokens > s->max_ctx) {
        v->code = "context_length_exceeded";
        return srv_bad(v, p->max_name, "%s %d + %d prompt tokens exceed the context of %d tokens", p->max_name,
                   p->req.max_tokens, n_prompt, s->max_ctx);
    }
    return true;
}

/* echo: the prompt's text before the completion (a token prompt is
 * detokenized, BOS and other control tokens giving nothing) */
static bool prepare_echo(srv *s, parsed *p, verr *v) {
    if (!p->echo) return true;
    if (p->text) {
        p->echo_text = strdup(p->text);
    } else {
        srv_text t = {0};
        char piece[256];
        bool ok = srv_text_append(&t, "", 0);
        for (int i = 0; ok && i < p->n_prompt; i++) {
            const int n = kvant_token_to_piece(s->m, i ? p->tok[i - 1] : -1, p->tok[i], piece, sizeof piece);
            ok = srv_text_append(&t, piece, (size_t)(n > 0 ? n : 0));
        }
        p->echo_text = ok ? t.buf : NULL;
        if (!ok) srv_text_free(&t);
    }
    if (!p->echo_text) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    return true;
}

/* the model named, if any, must be this server's (404 otherwise) */
static bool check_model(srv *s, cJSON *j, verr *v) {
    cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (cJSON_IsString(model) && strcmp(model->valuestring, s->model_id)) {
        v->status = 404;
        v->code = "model_not_found";
        return srv_bad(v, "model", "the model '%.200s' does not exist (this server has '%s')", model->valuestring,
                   s->model_id);
    }
    return true;
}

bool srv_check_model(srv *s, cJSON *j, verr *v) { return check_model(s, j, v); } /* embed.c's */

/* ---- endpoints ------------------------------------------------------------------ */
bool srv_validate_completion(srv *s, cJSON *j, parsed *p, verr *v) {
    return parse_common(s, j, false, p, v) && parse_prompt(s, j, p, v) && check_model(s, j, v) &&
           prepare_prompt(s, false, p, v) && prepare_echo(s, p, v);
}

bool srv_validate_chat(srv *s, cJSON *j, parsed *p, verr *v) {
    return parse_common(s, j, true, p, v) && parse_messages(s, j, p, v, true) && parse_tool_choice(s, j, p, v) &&
           check_model(s, j, v) && prepare_prompt(s, true, p, v);
}

/* {"messages": [...], "tools": [...], "add_generation_prompt": bool (default
 * true)}: rendered as /v1/chat/completions renders them; other fields are
 * ignored (llama-server's /apply-template takes a whole chat request;
 * nothing is generated) */
bool srv_validate_apply_template(srv *s, cJSON *j, parsed *p, verr *v) {
    bool add = true;
    if (!get_bool(j, "add_generation_prompt", &add, v)) return false;
    return parse_messages(s, j, p, v, add);
}

/* fields outside `allowed` (NULL-terminated) are refused by name */
static bool only_fields(cJSON *j, const char *const *allowed, verr *v) {
    cJSON *f;
    cJSON_ArrayForEach(f, j) {
        const char *const *a = allowed;
        while (*a && strcmp(*a, f->string)) a++;
        if (!*a) {
            v->code = "unknown_field";
            return srv_bad(v, f->string, "unrecognized request argument supplied: '%.64s'", f->string);
        }
    }
    return true;
}

/* {"content": "...", "add_special": false, "parse_special": true,
 *  "with_pieces": false} (llama-server's /tokenize and its defaults) */
bool srv_validate_tokenize(srv *s, cJSON *j, parsed *p, verr *v) {
    (void)s;
    static const char *const allowed[] = {"content", "add_special", "parse_special", "with_pieces", "model", NULL};
    if (!only_fields(j, allowed, v)) return false;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
    if (!cJSON_IsString(c)) return srv_bad(v, "content", "'content' must be a string");
    p->add_special = false;
    p->parse_special = true;
    if (!get_bool(j, "add_special", &p->add_special, v) || !get_bool(j, "parse_special", &p->parse_special, v) ||
        !get_bool(j, "with_pieces", &p->with_pieces, v) || !check_model(s, j, v))
        return false;
    if (!(p->text = strdup(c->valuestring))) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    return true;
}

/* {"tokens": [ids]} */
bool srv_validate_detokenize(srv *s, cJSON *j, parsed *p, verr *v) {
    static const char *const allowed[] = {"tokens", "model", NULL};
    if (!only_fields(j, allowed, v)) return false;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(t)) return srv_bad(v, "tokens", "'tokens' must be an array of token ids");
    const int n = cJSON_GetArraySize(t);
    if (n && !(p->ids = malloc((size_t)n * sizeof *p->ids))) {
        v->status = 500;
        return srv_bad(v, NULL, "out of memory");
    }
    cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < s->info.vocab_size) ||
            e->valuedouble != (double)(int)e->valuedouble)
            return srv_bad(v, "tokens", "token ids must be integers in [0, %d); tokens[%d] is not", s->info.vocab_size,
                       p->n_ids);
        p->ids[p->n_ids++] = (int32_t)e->valuedouble;
    }
    return check_model(s, j, v);
}
