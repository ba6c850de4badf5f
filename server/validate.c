/* validate.c - request bodies -> parsed requests, one function per
 * endpoint.  Every field is type- and range-checked; a refusal names the
 * field (verr.param) in OpenAI's error shape.  Generation requests are
 * tokenized here and checked against the context. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_internal.h"

/* ---- fields -------------------------------------------------------------------- */

static bool bad(verr *v, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->param = param;
    return false;
}

/* number field: absent/null keeps *out; wrong type or range is an error */
static bool get_num(cJSON *j, const char *name, double lo, double hi, bool integer, double *out, verr *v) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f)) return bad(v, name, "'%s' must be a number", name);
    const double x = f->valuedouble;
    if (integer && x != (double)(int64_t)x) return bad(v, name, "'%s' must be an integer", name);
    if (!(x >= lo && x <= hi)) return bad(v, name, "'%s' must be in [%g, %g], got %g", name, lo, hi, x);
    *out = x;
    return true;
}

static bool get_bool(cJSON *j, const char *name, bool *out, verr *v) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsBool(f)) return bad(v, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return true;
}


void srv_parsed_free(parsed *p) {
    free(p->text);
    free(p->ids);
    free(p->tok);
    for (int i = 0; i < p->n_stops; i++) free(p->stops[i]);
}

static bool parse_common(srv *s, cJSON *j, bool chat, parsed *p, verr *v) {
    double x;
    kvant_sampling *sp = &p->req.sampling;
    *sp = kvant_sampling_default();
    sp->temperature = 1.0f, sp->top_k = 0, sp->top_p = 1.0f, sp->min_p = 0.0f, sp->repeat_penalty = 1.0f;
    sp->seed = (uint64_t)time(NULL) * 6364136223846793005ULL + __atomic_add_fetch(&s->seed_ctr, 1, __ATOMIC_RELAXED);
    p->req.n = 1;
    p->logprobs = -1;
    x = -1;
    if (!get_num(j, chat ? "max_completion_tokens" : "max_tokens", 1, 1e9, true, &x, v)) return false;
    if (!get_num(j, "max_tokens", 1, 1e9, true, &x, v)) return false;
    if (x > 0) p->req.max_tokens = (int)x, p->has_max_tokens = true;
    x = sp->temperature;
    if (!get_num(j, "temperature", 0, 2, false, &x, v)) return false;
    sp->temperature = (float)x;
    x = sp->top_p;
    if (!get_num(j, "top_p", 0, 1, false, &x, v)) return false;
    sp->top_p = x > 0 ? (float)x : 1.0f;
    x = 0;
    if (!get_num(j, "top_k", -1, 1e6, true, &x, v)) return false;
    sp->top_k = x > 0 ? (int)x : 0;
    x = 0;
    if (!get_num(j, "min_p", 0, 1, false, &x, v)) return false;
    sp->min_p = (float)x;
    x = 1;
    if (!get_num(j, "repetition_penalty", 0.01, 10, false, &x, v)) return false;
    sp->repeat_penalty = (float)x;
    x = -1;
    if (!get_num(j, "seed", -9.2e18, 9.2e18, true, &x, v)) return false;
    if (x != -1) sp->seed = (uint64_t)(int64_t)x;
    x = 1;
    if (!get_num(j, "n", 1, SRV_MAX_N, true, &x, v)) return false;
    p->req.n = (int)x;
    for (const char **pn = (const char *[]){"presence_penalty", "frequency_penalty", NULL}; *pn; pn++) {
        x = 0;
        if (!get_num(j, *pn, -2, 2, false, &x, v)) return false;
    }
    if (!get_bool(j, "stream", &p->stream, v)) return false;
    if (!get_bool(j, "ignore_eos", &p->req.ignore_eos, v)) return false;
    cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(v, "stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &p->include_usage, v)) return false;
    }
    if (chat) {
        bool lp = false;
        if (!get_bool(j, "logprobs", &lp, v)) return false;
        x = 0;
        if (!get_num(j, "top_logprobs", 0, KVANT_MAX_LOGPROBS, true, &x, v)) return false;
        if (lp) p->logprobs = (int)x;
    } else {
        x = -1;
        if (!get_num(j, "logprobs", 0, KVANT_MAX_LOGPROBS, true, &x, v)) return false;
        p->logprobs = (int)x;
    }
    if (p->logprobs >= 0) p->req.logprobs = p->logprobs > 0 ? p->logprobs : 1;
    cJSON *stop = cJSON_GetObjectItemCaseSensitive(j, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        cJSON *one = cJSON_IsString(stop) ? stop : NULL;
        if (!one && !cJSON_IsArray(stop)) return bad(v, "stop", "'stop' must be a string or an array of strings");
        const int n = one ? 1 : cJSON_GetArraySize(stop);
        if (n > SRV_MAX_STOPS) return bad(v, "stop", "at most %d stop strings", SRV_MAX_STOPS);
        for (int i = 0; i < n; i++) {
            cJSON *e = one ? one : cJSON_GetArrayItem(stop, i);
            if (!cJSON_IsString(e)) return bad(v, "stop", "'stop' must be a string or an array of strings");
            const size_t len = strlen(e->valuestring);
            if (!len || len > SRV_MAX_STOP_LEN)
                return bad(v, "stop", "stop strings must have 1 to %d bytes", SRV_MAX_STOP_LEN);
            p->stops[p->n_stops++] = strdup(e->valuestring);
        }
    }
    cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return bad(v, "model", "'model' must be a string");
    return true;
}

static bool parse_prompt(srv *s, cJSON *j, parsed *p, verr *v) {
    cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (!pr) return bad(v, "prompt", "'prompt' is required");
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && !cJSON_IsNumber(cJSON_GetArrayItem(pr, 0)))
        pr = cJSON_GetArrayItem(pr, 0); /* ["text"] or [[ids]] */
    if (cJSON_IsString(pr)) {
        if (!pr->valuestring[0]) return bad(v, "prompt", "'prompt' is empty");
        p->text = strdup(pr->valuestring);
        return true;
    }
    if (cJSON_IsArray(pr)) {
        const int n = cJSON_GetArraySize(pr);
        if (!n) return bad(v, "prompt", "'prompt' is empty");
        if (cJSON_IsString(cJSON_GetArrayItem(pr, 0)) || cJSON_IsArray(cJSON_GetArrayItem(pr, 0)))
            return bad(v, "prompt", "one prompt per request (got %d)", n);
        if (n > s->max_ctx) return bad(v, "prompt", "the prompt has %d tokens; the context holds %d", n, s->max_ctx);
        p->ids = malloc((size_t)n * sizeof *p->ids);
        if (!p->ids) return bad(v, "prompt", "out of memory");
        for (int i = 0; i < n; i++) {
            cJSON *e = cJSON_GetArrayItem(pr, i);
            if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int)e->valuedouble || e->valueint < 0 ||
                e->valueint >= s->info.vocab_size)
                return bad(v, "prompt", "token ids must be integers in [0, %d)", s->info.vocab_size);
            p->ids[i] = e->valueint;
        }
        p->n_ids = n;
        return true;
    }
    return bad(v, "prompt", "'prompt' must be a string, an array of token ids or an array of one string");
}

static bool parse_messages(srv *s, cJSON *j, parsed *p, verr *v, bool add_assistant) {
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!ms) return bad(v, "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return bad(v, "messages", "'messages' must be an array");
    const int n = cJSON_GetArraySize(ms);
    if (!n) return bad(v, "messages", "'messages' is empty");
    if (n > 4096) return bad(v, "messages", "too many messages");
    kvant_chat_msg *msg = calloc((size_t)n, sizeof *msg);
    char **own = calloc((size_t)n, sizeof *own);
    bool ok = msg && own, any = false;
    for (int i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_GetArrayItem(ms, i);
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            ok = bad(v, "messages", "messages[%d] needs a string 'role'", i);
            break;
        }
        if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
            strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "developer")) {
            ok = bad(v, "messages", "messages[%d]: unknown role '%.32s'", i, role->valuestring);
            break;
        }
        msg[i].role = strcmp(role->valuestring, "developer") ? role->valuestring : "system";
        if (cJSON_IsString(content)) {
            msg[i].content = content->valuestring;
        } else if (cJSON_IsArray(content)) { /* [{"type":"text","text":...}, ...] */
            size_t len = 0;
            cJSON *part;
            cJSON_ArrayForEach(part, content) {
                cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(t)) {
                    ok = bad(v, "messages", "messages[%d]: only text content parts are supported", i);
                    break;
                }
                len += strlen(t->valuestring);
            }
            if (!ok) break;
            char *buf = own[i] = malloc(len + 1);
            if (!buf) { ok = bad(v, "messages", "out of memory"); break; }
            buf[0] = 0;
            cJSON_ArrayForEach(part, content) strcat(buf, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
            msg[i].content = buf;
        } else {
            ok = bad(v, "messages", "messages[%d] needs a string 'content'", i);
            break;
        }
        if (msg[i].content[0]) any = true;
    }
    if (ok && !any) ok = bad(v, "messages", "every message is empty");
    kvant_status st;
    if (ok && !(p->text = kvant_chat_render(s->chat_kind, msg, n, add_assistant, &st))) ok = bad(v, "messages", "%s", st.msg);
    for (int i = 0; own && i < n; i++) free(own[i]);
    free(own);
    free(msg);
    return ok;
}

/* the prompt's tokens (BOS first; chat: special tokens too, BOS not
 * doubled), the context-length checks and the max_tokens default */
static bool prepare_prompt(srv *s, bool chat, parsed *p, verr *v) {
    int n_prompt = p->n_ids;
    if (p->text) { /* more than the context is an error */
        p->tok = malloc((size_t)(s->max_ctx + 1) * sizeof *p->tok);
        if (!p->tok) {
            v->status = 500;
            return bad(v, NULL, "out of memory");
        }
        n_prompt = chat ? kvant_chat_tokenize(s->m, p->text, strlen(p->text), p->tok, s->max_ctx + 1)
                        : kvant_tokenize(s->m, p->text, strlen(p->text), true, p->tok, s->max_ctx + 1);
        if (n_prompt == INT_MIN) {
            v->status = 500;
            return bad(v, NULL, "out of memory");
        }
        if (n_prompt < 0) n_prompt = -n_prompt;
    } else
        p->tok = p->ids, p->ids = NULL;
    p->n_prompt = n_prompt;
    if (n_prompt >= s->max_ctx) {
        v->code = "context_length_exceeded";
        return bad(v, chat ? "messages" : "prompt",
                   "the prompt has %d tokens; the context holds %d, with room for at least one new token", n_prompt,
                   s->max_ctx);
    }
    if (!p->has_max_tokens) {
        const int def = chat ? s->max_ctx : s->p.default_max_tokens;
        p->req.max_tokens = s->max_ctx - n_prompt < def ? s->max_ctx - n_prompt : def;
    } else if (n_prompt + p->req.max_tokens > s->max_ctx) {
        v->code = "context_length_exceeded";
        return bad(v, "max_tokens", "max_tokens %d + %d prompt tokens exceed the context of %d tokens",
                   p->req.max_tokens, n_prompt, s->max_ctx);
    }
    return true;
}

/* the model named, if any, must be this server's (404 otherwise) */
static bool check_model(srv *s, cJSON *j, verr *v) {
    cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (cJSON_IsString(model) && strcmp(model->valuestring, s->model_id)) {
        v->status = 404;
        v->code = "model_not_found";
        return bad(v, "model", "the model '%.200s' does not exist (this server has '%s')", model->valuestring,
                   s->model_id);
    }
    return true;
}

/* ---- endpoints ------------------------------------------------------------------ */
bool srv_validate_completion(srv *s, cJSON *j, parsed *p, verr *v) {
    return parse_common(s, j, false, p, v) && parse_prompt(s, j, p, v) && check_model(s, j, v) &&
           prepare_prompt(s, false, p, v);
}

bool srv_validate_chat(srv *s, cJSON *j, parsed *p, verr *v) {
    return parse_common(s, j, true, p, v) && parse_messages(s, j, p, v, true) && check_model(s, j, v) &&
           prepare_prompt(s, true, p, v);
}

/* ---- /apply-template with tools ----------------------------------------------------
 * A body with "tools", a message of role "tool" or one with "tool_calls" is
 * rendered with kvant_chat_render_tools (each family's own tool format, see
 * README "Tool calls"): tools and tool_calls go to the library as JSON text,
 * content may be null beside tool_calls, tool_call_id / name are strings.
 * Only /apply-template takes this path: /v1/chat/completions does not take
 * tools until it also reads the calls out of replies
 * (kvant_chat_parse_tool_calls, kvant_chat_tool_prefix). */
static cJSON *tool_field(cJSON *j, const char *name) { /* null is absent */
    cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static bool uses_tools(cJSON *j) {
    if (tool_field(j, "tools")) return true;
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "messages"), *m;
    if (!cJSON_IsArray(ms)) return false;
    cJSON_ArrayForEach(m, ms) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (tool_field(m, "tool_calls") || (cJSON_IsString(role) && !strcmp(role->valuestring, "tool"))) return true;
    }
    return false;
}

static bool render_tool_messages(srv *s, cJSON *j, parsed *p, verr *v, bool add) {
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "messages"), *tools = tool_field(j, "tools");
    if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms)) return bad(v, "messages", "'messages' must be a non-empty array");
    if (tools && !cJSON_IsArray(tools)) return bad(v, "tools", "'tools' must be an array");
    const int n = cJSON_GetArraySize(ms);
    if (n > 4096) return bad(v, "messages", "too many messages");
    kvant_chat_msg *msg = calloc((size_t)n, sizeof *msg);
    char **calls = calloc((size_t)n, sizeof *calls), *tools_json = tools ? cJSON_PrintUnformatted(tools) : NULL;
    bool ok = msg && calls && (!tools || tools_json);
    if (!ok) v->status = 500, bad(v, NULL, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_GetArrayItem(ms, i), *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = tool_field(m, "content"), *tc = tool_field(m, "tool_calls"),
              *id = tool_field(m, "tool_call_id"), *name = tool_field(m, "name");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            ok = bad(v, "messages", "messages[%d] needs a string 'role'", i);
        else if ((content && !cJSON_IsString(content)) || (id && !cJSON_IsString(id)) || (name && !cJSON_IsString(name)))
            ok = bad(v, "messages", "messages[%d]: content, tool_call_id and name must be strings here", i);
        else if (tc && !(calls[i] = cJSON_PrintUnformatted(tc)))
            v->status = 500, ok = bad(v, NULL, "out of memory");
        if (!ok) break;
        msg[i] = (kvant_chat_msg){strcmp(role->valuestring, "developer") ? role->valuestring : "system",
                                  content ? content->valuestring : NULL, calls[i], id ? id->valuestring : NULL,
                                  name ? name->valuestring : NULL};
    }
    kvant_status st;
    if (ok && !(p->text = kvant_chat_render_tools(s->chat_kind, msg, n, tools_json, add, &st)))
        ok = bad(v, "messages", "%s", st.msg);
    for (int i = 0; calls && i < n; i++) cJSON_free(calls[i]);
    cJSON_free(tools_json);
    free(calls);
    free(msg);
    return ok;
}

/* {"messages": [...], "add_generation_prompt": bool (default true)} */
bool srv_validate_apply_template(srv *s, cJSON *j, parsed *p, verr *v) {
    bool add = true;
    if (!get_bool(j, "add_generation_prompt", &add, v)) return false;
    return uses_tools(j) ? render_tool_messages(s, j, p, v, add) : parse_messages(s, j, p, v, add);
}

/* fields outside `allowed` (NULL-terminated) are refused by name */
static bool only_fields(cJSON *j, const char *const *allowed, verr *v) {
    cJSON *f;
    cJSON_ArrayForEach(f, j) {
        const char *const *a = allowed;
        while (*a && strcmp(*a, f->string)) a++;
        if (!*a) {
            v->code = "unknown_field";
            return bad(v, f->string, "unrecognized request argument supplied: '%.64s'", f->string);
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
    if (!cJSON_IsString(c)) return bad(v, "content", "'content' must be a string");
    p->add_special = false;
    p->parse_special = true;
    if (!get_bool(j, "add_special", &p->add_special, v) || !get_bool(j, "parse_special", &p->parse_special, v) ||
        !get_bool(j, "with_pieces", &p->with_pieces, v) || !check_model(s, j, v))
        return false;
    if (!(p->text = strdup(c->valuestring))) {
        v->status = 500;
        return bad(v, NULL, "out of memory");
    }
    return true;
}

/* {"tokens": [ids]} */
bool srv_validate_detokenize(srv *s, cJSON *j, parsed *p, verr *v) {
    static const char *const allowed[] = {"tokens", "model", NULL};
    if (!only_fields(j, allowed, v)) return false;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(t)) return bad(v, "tokens", "'tokens' must be an array of token ids");
    const int n = cJSON_GetArraySize(t);
    if (n && !(p->ids = malloc((size_t)n * sizeof *p->ids))) {
        v->status = 500;
        return bad(v, NULL, "out of memory");
    }
    cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < s->info.vocab_size) ||
            e->valuedouble != (double)(int)e->valuedouble)
            return bad(v, "tokens", "token ids must be integers in [0, %d); tokens[%d] is not", s->info.vocab_size,
                       p->n_ids);
        p->ids[p->n_ids++] = (int32_t)e->valuedouble;
    }
    return check_model(s, j, v);
}
