/* tool_grammar.c - the grammar that forces a tool call (OpenAI's tool_choice
 * "required" / a named function) in the format each chat-template family's
 * parser (kvant_chat_parse_tool_calls) reads, composed in ONE place:
 *
 *   a JSON Schema  {"anyOf": [{"type": "object", "properties": {"name":
 *                  {"const": N}, ARGS: P}, "required": ["name", ARGS]}, ...]}
 *                  over the allowed tools (ARGS "arguments", Llama 3.x
 *                  "parameters"; P the tool's parameters, absent: any object),
 *   compiled to GBNF by the schema compiler (grammar_schema_to_gbnf; rule
 *                  root), its root renamed, then wrapped:
 *     Hermes (Qwen 2.5 / 3, every generic template):
 *                  root ::= "<tool_call>\n" call "\n</tool_call>"   (one call)
 *     Llama 3.1 / 3.2: the object is the whole reply.
 * Mistral's [TOOL_CALLS] is a control token, which the grammar vocabulary
 * gives no bytes (control tokens are never allowed), so its families are
 * refused (KVANT_ERR_UNSUPPORTED).  Each tool's parameters are compiled alone
 * first, so a schema kvant cannot compile is reported as that tool's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "chat/chat.h"
#include "grammar/grammar.h"

static const char CALL_RULE[] = "kvant-tool-call"; /* the schema compiler names rules root-* and json-* */

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static bool put(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (*len + n + 1 > c) c *= 2;
        char *q = realloc(*p, c);
        if (!q) return false;
        *p = q, *cap = c;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = 0;
    return true;
}

static bool puts_(char **p, size_t *len, size_t *cap, const char *s) { return put(p, len, cap, s, strlen(s)); }

/* gbnf with every identifier "root" (outside strings, classes and comments)
 * renamed to CALL_RULE, then the new root rule appended */
static char *wrap_gbnf(const char *g, const char *prefix, const char *suffix) {
    char *o = NULL;
    size_t len = 0, cap = 0, i = 0;
    const size_t n = strlen(g);
    bool ok = true;
    while (ok && i < n) {
        const char c = g[i];
        size_t j = i + 1;
        if (c == '"' || c == '[') { /* a literal or a class, escapes included */
            const char close = c == '"' ? '"' : ']';
            while (j < n && g[j] != close) j += g[j] == '\\' && j + 1 < n ? 2 : 1;
            if (j < n) j++;
        } else if (c == '#') {
            while (j < n && g[j] != '\n') j++;
        } else if (ident_char(c)) {
            while (j < n && ident_char(g[j])) j++;
            if (j - i == 4 && !memcmp(g + i, "root", 4)) {
                ok = put(&o, &len, &cap, CALL_RULE, sizeof CALL_RULE - 1);
                i = j;
                continue;
            }
        }
        ok = put(&o, &len, &cap, g + i, j - i);
        i = j;
    }
    char head[128];
    snprintf(head, sizeof head, "\nroot ::= %s %s %s\n", prefix, CALL_RULE, suffix);
    if (ok) ok = put(&o, &len, &cap, head, strlen(head));
    if (!ok) free(o);
    return ok ? o : NULL;
}

static char *json_text(const gjson *v) {
    size_t n;
    return gjson_write(v, &n);
}

char *kvant_chat_tool_gbnf(kvant_chat_template t, const char *tools_json, const char *name, int *bad_tool,
                           kvant_status *st) {
    if (bad_tool) *bad_tool = -1;
    if ((int)t < 0 || t >= KVANT_CHAT_N_TEMPLATES) {
        core_fail(st, KVANT_ERR_ARG, "unknown chat template %d", (int)t);
        return NULL;
    }
    const chat_tool_format f = chat_tools_of((chat_template)t);
    if (f == CHAT_TOOLS_MISTRAL) {
        core_fail(st, KVANT_ERR_UNSUPPORTED, "template %s writes calls after [TOOL_CALLS], a control token, which "
                  "constrained decoding never allows (the grammar sees only the tokens' bytes); a forced call "
                  "cannot be written in its format", kvant_chat_template_name(t));
        return NULL;
    }
    const bool llama = f == CHAT_TOOLS_LLAMA3;
    gjson *tools = tools_json ? gjson_parse(tools_json, strlen(tools_json), st) : NULL;
    if (!tools) {
        if (!tools_json) core_fail(st, KVANT_ERR_ARG, "no tools to call");
        return NULL;
    }
    char *schema = NULL, *gbnf = NULL, *out = NULL;
    size_t len = 0, cap = 0;
    bool ok = tools->type == GJSON_ARRAY, found = false;
    if (!ok) core_fail(st, KVANT_ERR_ARG, "tools must be a JSON array");
    ok = ok && put(&schema, &len, &cap, "{\"anyOf\":[", 10);
    for (int i = 0; ok && i < tools->n; i++) {
        const gjson *fn = gjson_get(tools->items[i], "function");
        const gjson *nm = gjson_get(fn, "name"), *params = gjson_get(fn, "parameters");
        if (!nm || nm->type != GJSON_STRING) {
            ok = false;
            core_fail(st, KVANT_ERR_ARG, "tools[%d].function.name is not a string", i);
            break;
        }
        if (name && strcmp(nm->str, name)) continue;
        if (params && params->type == GJSON_NULL) params = NULL;
        const gjson *type = gjson_get(params, "type");
        if (params && (params->type != GJSON_OBJECT ||
                       (type && !(type->type == GJSON_STRING && !strcmp(type->str, "object"))))) {
            ok = false;
            if (bad_tool) *bad_tool = i;
            core_fail(st, KVANT_ERR_UNSUPPORTED, "tools[%d].function.parameters must be an object schema (a call's "
                      "arguments are an object)", i);
            break;
        }
        char *p = params ? json_text(params) : NULL, *nt = json_text(nm);
        if ((params && !p) || !nt) {
            free(p), free(nt);
            ok = false;
            core_fail(st, KVANT_ERR_NOMEM, "out of memory");
            break;
        }
        if (p) { /* alone first, so a failure is this tool's */
            kvant_status s2;
            char *g = grammar_schema_to_gbnf(p, strlen(p), &s2);
            if (!g) {
                if (bad_tool) *bad_tool = i;
                core_fail(st, s2.code, "tools[%d].function.parameters: %s", i, s2.msg);
                free(p), free(nt);
                ok = false;
                break;
            }
            free(g);
        }
        char head[64];
        snprintf(head, sizeof head, "%s{\"type\":\"object\",\"properties\":{\"name\":{\"const\":", found ? "," : "");
        ok = put(&schema, &len, &cap, head, strlen(head)) && put(&schema, &len, &cap, nt, strlen(nt)) &&
             puts_(&schema, &len, &cap, llama ? "},\"parameters\":" : "},\"arguments\":") &&
             puts_(&schema, &len, &cap, p ? p : "{\"type\":\"object\"}") &&
             puts_(&schema, &len, &cap, llama ? "},\"required\":[\"name\",\"parameters\"]}"
                                              : "},\"required\":[\"name\",\"arguments\"]}");
        if (!ok) core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        found = true;
        free(p), free(nt);
    }
    if (ok && !found) {
        ok = false;
        if (name) core_fail(st, KVANT_ERR_ARG, "no tool is named '%.64s'", name);
        else core_fail(st, KVANT_ERR_ARG, "no tools to call");
    }
    if (ok && !put(&schema, &len, &cap, "]}", 2)) ok = false, core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    if (ok) ok = (gbnf = grammar_schema_to_gbnf(schema, len, st)) != NULL;
    if (ok && llama) out = gbnf, gbnf = NULL; /* the object is the reply */
    else if (ok && !(out = wrap_gbnf(gbnf, "\"<tool_call>\\n\"", "\"\\n</tool_call>\"")))
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    if (out) core_ok(st);
    free(gbnf);
    free(schema);
    gjson_free(tools);
    return out;
}

kvant_grammar *kvant_chat_tool_grammar(kvant_model *m, kvant_chat_template t, const char *tools_json,
                                       const char *name, int *bad_tool, kvant_status *st) {
    char *g = kvant_chat_tool_gbnf(t, tools_json, name, bad_tool, st);
    if (!g) return NULL;
    kvant_grammar *h = kvant_grammar_new(m, KVANT_GRAMMAR_GBNF, g, strlen(g), st);
    free(g);
    return h;
}
