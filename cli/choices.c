/* choices.c - the names of the library's choices (its enums), in one place:
 * every command that takes --kv-type, --attn, --method, a file type ... parses
 * it here, and prints the name back from here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"

const cli_choice cli_kv_types[] = {{"f16", KVANT_KV_F16}, {"f32", KVANT_KV_F32}, {"q8_0", KVANT_KV_Q8_0}, {NULL, 0}};
const cli_choice cli_attns[] = {{"flash", KVANT_ATTN_FLASH}, {"naive", KVANT_ATTN_NAIVE}, {NULL, 0}};
const cli_choice cli_caches[] = {{"paged", KVANT_CACHE_PAGED}, {"contiguous", KVANT_CACHE_CONTIGUOUS}, {NULL, 0}};
const cli_choice cli_stream_policies[] = {
    {"full", KVANT_STREAM_FULL}, {"streaming", KVANT_STREAM_SINKS}, {"recompute", KVANT_STREAM_RECOMPUTE}, {NULL, 0}};
const cli_choice cli_int8_modes[] = {
    {"w8a8", KVANT_INT8_W8A8}, {"mixed", KVANT_INT8_MIXED}, {"f32", KVANT_INT8_NONE}, {NULL, 0}};
const cli_choice cli_ptq_schemes[] = {
    {"absmax", KVANT_PTQ_ABSMAX}, {"zeropoint", KVANT_PTQ_ZEROPOINT}, {"zp", KVANT_PTQ_ZEROPOINT}, {NULL, 0}};
const cli_choice cli_ptq_clips[] = {{"none", KVANT_PTQ_CLIP_NONE}, {"mse", KVANT_PTQ_CLIP_MSE}, {NULL, 0}};
const cli_choice cli_ptq_fallbacks[] = {{"channel", KVANT_PTQ_FALLBACK_CHANNEL},
                                        {"f16", KVANT_PTQ_FALLBACK_F16},
                                        {"f32", KVANT_PTQ_FALLBACK_F32},
                                        {NULL, 0}};
const cli_choice cli_prune_methods[] = {{"magnitude", KVANT_PRUNE_MAGNITUDE},
                                        {"wanda", KVANT_PRUNE_WANDA},
                                        {"sparsegpt", KVANT_PRUNE_SPARSEGPT},
                                        {"structured", KVANT_PRUNE_STRUCTURED},
                                        {NULL, 0}};
const cli_choice cli_prune_targets[] = {{"ffn", KVANT_PRUNE_FFN}, {"heads", KVANT_PRUNE_HEADS}, {NULL, 0}};
const cli_choice cli_prune_formats[] = {{"dense", KVANT_PRUNE_DENSE},
                                        {"sparse24-f16", KVANT_PRUNE_SPARSE24_F16},
                                        {"sparse24-q8", KVANT_PRUNE_SPARSE24_Q8},
                                        {NULL, 0}};

/* "a, b, c" (the first spelling of each value) */
static void list_names(const cli_choice *tab, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; tab[i].name && n < cap; i++) {
        bool seen = false;
        for (int k = 0; k < i; k++) seen |= tab[k].value == tab[i].value;
        if (!seen) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", tab[i].name);
    }
}

bool cli_choice_of(const cli_choice *tab, const char *name, int *out) {
    for (int i = 0; name && tab[i].name; i++)
        if (!strcasecmp(name, tab[i].name)) {
            *out = tab[i].value;
            return true;
        }
    return false;
}

int cli_choice_arg(cli_args *a, const cli_choice *tab) {
    const char *flag = a->argv[a->i], *v = cli_str(a);
    int x = tab[0].value;
    if (!v || cli_choice_of(tab, v, &x)) return x;
    char names[256];
    list_names(tab, names, sizeof names);
    fprintf(stderr, "%s: bad value '%s' for %s: one of %s\n", a->cmd, v, flag, names);
    a->error = true;
    return tab[0].value;
}

const char *cli_choice_name(const cli_choice *tab, int value) {
    for (int i = 0; tab[i].name; i++)
        if (tab[i].value == value) return tab[i].name;
    return "?";
}

bool cli_ftype_of(const char *name, kvant_ftype *out) {
    kvant_ftype t;
    const char *n;
    for (int i = 0; name && (n = kvant_ftype_list(i, &t)); i++)
        if (!strcasecmp(name, n)) {
            *out = t;
            return true;
        }
    return false;
}

void cli_ftype_names(char *buf, size_t cap) {
    size_t n = 0;
    const char *s;
    buf[0] = 0;
    for (int i = 0; (s = kvant_ftype_list(i, NULL)) && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", s);
}

bool cli_granularity_of(const char *s, kvant_ptq_granularity *g, int *group) {
    if (!strcasecmp(s, "channel")) return *g = KVANT_PTQ_CHANNEL, *group = 0, true;
    if (!strcasecmp(s, "tensor")) return *g = KVANT_PTQ_TENSOR, *group = 0, true;
    const char *num = !strncasecmp(s, "group:", 6) ? s + 6 : (s[0] == 'g' || s[0] == 'G') ? s + 1 : NULL;
    if (!num || !*num) return false;
    char *end;
    const long v = strtol(num, &end, 10);
    if (*end || v < 1 || v > 1 << 20) return false;
    *g = KVANT_PTQ_GROUP;
    *group = (int)v;
    return true;
}

bool cli_pattern_of(const char *s, int *keep, int *group) {
    if (!strcasecmp(s, "unstructured")) return *keep = 0, *group = 0, true;
    int n, m;
    char tail;
    if (sscanf(s, "%d:%d%c", &n, &m, &tail) != 2 || m < 2 || m > 64 || n < 1 || n >= m) return false;
    *keep = n;
    *group = m;
    return true;
}
