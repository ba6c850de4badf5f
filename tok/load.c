/* tok/load.c - building a tokenizer.
 *
 * Two sources: GGUF metadata (tokenizer.ggml.*) and a llama2.c
 * tokenizer.bin.  Both copy every string into one blob the tokenizer owns
 * (the source may be closed afterwards), then share the finishing steps:
 * the text -> id hash table, byte-fallback ids, the special-token list and
 * the decoded piece of every token. */
#define _GNU_SOURCE /* memmem */
#include "tok/tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's escaped space */

/* An empty tokenizer of n tokens (entries zeroed), or NULL. */
static tok *tok_new(tok_kind kind, int n_vocab) {
    tok *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->n_vocab = n_vocab;
    t->bos = t->eos = t->unk = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    t->v = calloc((size_t)n_vocab, sizeof *t->v);
    if (!t->v) {
        free(t);
        return NULL;
    }
    return t;
}

void tok_free(tok *t) {
    if (!t) return;
    tok_map_free(&t->vocab);
    tok_map_free(&t->merges);
    tok_pre_free(t->pre);
    free(t->special);
    free(t->pieces);
    free(t->blob);
    free(t->v);
    free(t);
}

/* "<0xXX>" -> XX, anything else -> -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The decoded piece of token i written to dst (room for its text length);
 * returns its length.  See tok_decode_piece for the rules. */
static size_t make_piece(const tok *t, int i, char *dst) {
    const tok_entry *e = &t->v[i];
    const char *s = t->blob + e->off;
    switch (e->type) {
    case TOK_TYPE_USER_DEFINED:
        memcpy(dst, s, e->len);
        return e->len;
    case TOK_TYPE_BYTE: {
        int b = parse_byte_token(s, e->len);
        if (b < 0) { /* typed as a byte but not spelled like one: keep the text */
            memcpy(dst, s, e->len);
            return e->len;
        }
        dst[0] = (char)b;
        return 1;
    }
    case TOK_TYPE_NORMAL:
        if (t->kind == TOK_GPT2) return tok_bpe_decode_text(t, s, e->len, dst);
        size_t n = 0;
        for (size_t k = 0; k < e->len;) {
            if (e->len - k >= 3 && memcmp(s + k, SPM_SPACE, 3) == 0) {
                dst[n++] = ' ';
                k += 3;
            } else {
                dst[n++] = s[k++];
            }
        }
        return n;
    default: /* control, unknown, unused, undefined: nothing */
        return 0;
    }
}

typedef struct {
    uint32_t len;
    int32_t id;
} spec_key;

/* longest first, then lowest id (llama.cpp sorts by length only; the id
 * makes equal lengths deterministic) */
static int spec_cmp(const void *pa, const void *pb) {
    const spec_key *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Shared last steps once t->v, t->blob and the kind-specific fields are set:
 * the lookup table, byte fallback, special list, decoded pieces.  Returns
 * KVANT_OK or fills st (the caller frees t). */
static void eog_add(tok *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab || t->n_eog == (int)(sizeof t->eog / sizeof *t->eog)) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

/* The end-of-generation set (tok_is_eog), as llama.cpp's special_eog_ids
 * (llama-vocab.cpp at 34af94cd9): the FIM pad / repo / separator ids, the
 * end-of-turn texts, and EOS, EOT, EOM; when a vocabulary has both
 * <|return|> and <|call|> (gpt-oss) or <|calls|> and <|flush|> (solar-open),
 * <|end|> is not an end there (it closes a message inside a turn). */
static int32_t text_id(const tok *t, const char *text) {
    return tok_map_get(&t->vocab, t->blob, text, strlen(text), "", 0);
}

static void eog_find(tok *t, const gguf_ctx *g) {
    static const char *const keys[] = {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                       "tokenizer.ggml.fim_sep_token_id"};
    uint32_t v;
    for (size_t i = 0; g && i < sizeof keys / sizeof *keys; i++)
        if (gguf_get_u32(g, keys[i], &v) && v < (uint32_t)t->n_vocab) eog_add(t, (int32_t)v);
    static const char *const texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"), /* DeepSeek's; split: \x9c then 'e' */
        "[e~["};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) eog_add(t, text_id(t, texts[i]));
    eog_add(t, t->eos);
    if (g && gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &v) && v < (uint32_t)t->n_vocab) eog_add(t, (int32_t)v);
    if (g && gguf_get_u32(g, "tokenizer.ggml.eom_token_id", &v) && v < (uint32_t)t->n_vocab) eog_add(t, (int32_t)v);
    const bool harmony = (text_id(t, "<|return|>") >= 0 && text_id(t, "<|call|>") >= 0) ||
                         (text_id(t, "<|calls|>") >= 0 && text_id(t, "<|flush|>") >= 0);
    const int32_t end = text_id(t, "<|end|>");
    if (harmony && end >= 0)
        for (int i = 0; i < t->n_eog; i++)
            if (t->eog[i] == end) t->eog[i] = t->eog[--t->n_eog];
}

/* ---- token types and attributes llama.cpp adjusts after loading ---------------
 * (llama_vocab::impl::load): end-of-turn and fill-in-the-middle texts become
 * control tokens, so that plain text never matches them; gpt-oss's channel
 * markers become user-defined; Phi-3's special tokens eat the spaces after
 * them (RSTRIP) and some masks the spaces before them (LSTRIP). */

static int32_t find_text(const tok *t, const char *s) {
    return tok_map_get(&t->vocab, t->blob, s, strlen(s), "", 0);
}

static void set_type(tok *t, const char *const *texts, uint8_t type) {
    for (; *texts; texts++) {
        int32_t id = find_text(t, *texts);
        if (id >= 0) t->v[id].type = type;
    }
}

static void set_attr(tok *t, const char *text, uint8_t attr, bool on) {
    int32_t id = find_text(t, text);
    if (id < 0) return;
    if (on) t->v[id].attr |= attr;
    else t->v[id].attr &= (uint8_t)~attr;
}

static bool has_key(const gguf_ctx *g, const char *key) { return gguf_find(g, key) != NULL; }

/* general.name lowercased contains one of the words */
static bool name_has(const gguf_ctx *g, const char *a, const char *b) {
    gguf_str v;
    if (!gguf_get_str(g, "general.name", &v)) return false;
    char low[256];
    size_t n = v.len < sizeof low - 1 ? v.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++) low[i] = (char)(v.data[i] >= 'A' && v.data[i] <= 'Z' ? v.data[i] + 32 : v.data[i]);
    low[n] = 0;
    return strstr(low, a) || (b && strstr(low, b));
}

static void adjust_types(tok *t, const gguf_ctx *g) {
    static const char *const eog[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"), /* DeepSeek's; split: \x9c then 'e' */ "[e~[", NULL,
    };
    static const struct {
        const char *key, *key2;
        const char *texts[9];
    } fim[] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id",
         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
          "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL}},
        {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id",
         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
          "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL}},
        {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id",
         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
          "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL}},
        {"tokenizer.ggml.fim_pad_token_id", NULL, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL}},
        {"tokenizer.ggml.fim_rep_token_id", NULL,
         {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL}},
        {"tokenizer.ggml.fim_sep_token_id", NULL, {"<|file_sep|>", NULL}},
    };
    static const char *const channel[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    if (!g) return;
    for (size_t i = 0; i < sizeof fim / sizeof *fim; i++)
        if (!has_key(g, fim[i].key) && !(fim[i].key2 && has_key(g, fim[i].key2)))
            set_type(t, fim[i].texts, TOK_TYPE_CONTROL);
    set_type(t, eog, TOK_TYPE_CONTROL);
    set_type(t, channel, TOK_TYPE_USER_DEFINED);
    /* gpt-oss / solar-open: <|end|> is not an end of turn there but text */
    int32_t end = find_text(t, "<|end|>");
    bool ret = find_text(t, "<|return|>") >= 0;
    bool call = find_text(t, "<|call|>") >= 0 || find_text(t, "<|calls|>") >= 0;
    if (end >= 0 && call && (ret || find_text(t, "<|flush|>") >= 0)) t->v[end].type = TOK_TYPE_USER_DEFINED;

    gguf_str pre = {0};
    gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    gguf_str arch = {0};
    gguf_get_str(g, "general.architecture", &arch);
    bool jina = false;
    static const char *const jina_pre[] = {"jina-v2-de", "jina-v2-es", "jina-v2-code"};
    for (size_t i = 0; i < 3; i++)
        jina |= pre.len >= strlen(jina_pre[i]) && memmem(pre.data, pre.len, jina_pre[i], strlen(jina_pre[i]));
    jina |= arch.len && (memmem(arch.data, arch.len, "nomic-bert-moe", 14) ||
                         memmem(arch.data, arch.len, "jina-bert-v3", 12));
    if (jina) {
        set_attr(t, "<mask>", TOK_ATTR_LSTRIP, true);
    } else if (name_has(g, "phi-3", "phi3")) {
        for (int i = 0; i < t->n_vocab; i++) {
            uint8_t ty = t->v[i].type;
            if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN)
                t->v[i].attr |= TOK_ATTR_RSTRIP;
        }
        set_attr(t, "</s>", TOK_ATTR_RSTRIP, true);
        set_attr(t, "<unk>", TOK_ATTR_RSTRIP, false);
        set_attr(t, "<s>", TOK_ATTR_RSTRIP, false);
        set_attr(t, "<|endoftext|>", TOK_ATTR_RSTRIP, false);
    } else if (name_has(g, "modern-bert", NULL)) {
        set_attr(t, "[MASK]", TOK_ATTR_LSTRIP, true);
    }
}

static kvant_code tok_finish(tok *t, const gguf_ctx *g, const char *name, kvant_status *st) {
    if (!tok_map_init(&t->vocab, (uint64_t)t->n_vocab))
        return core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory for the vocabulary table", name);
    for (int i = 0; i < t->n_vocab; i++)
        if (t->v[i].len > 0) tok_map_put(&t->vocab, t->blob, t->v[i].off, t->v[i].len, 0, 0, i);
    eog_find(t, g);
    adjust_types(t, g);

    for (int b = 0; b < 256; b++) { /* "<0xXX>", else the byte itself as a token */
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", (unsigned)b);
        int32_t id = tok_map_get(&t->vocab, t->blob, hex, 6, "", 0);
        if (id < 0) {
            char c = (char)b;
            id = tok_map_get(&t->vocab, t->blob, &c, 1, "", 0);
        }
        t->byte_id[b] = id;
    }

    uint8_t joins[128] = {0};
    for (int i = 0; i < t->n_vocab; i++)
        for (uint32_t k = 0; t->v[i].len >= 2 && k < t->v[i].len; k++) {
            uint8_t c = (uint8_t)t->blob[t->v[i].off + k];
            if (c < 128) joins[c] = 1;
        }
    for (int c = 0; c < 128; c++)
        if (!joins[c]) t->lone[c / 8] |= (uint8_t)(1u << (c % 8));

    spec_key *keys = malloc(((size_t)t->n_vocab + 1) * sizeof *keys);
    if (!keys) return core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory", name);
    int n_spec = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->v[i].type;
        if (t->v[i].len > 0 && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED))
            keys[n_spec++] = (spec_key){t->v[i].len, i};
    }
    qsort(keys, (size_t)n_spec, sizeof *keys, spec_cmp);
    t->special = malloc(((size_t)n_spec + 1) * sizeof *t->special);
    if (!t->special) {
        free(keys);
        return core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory", name);
    }
    for (int k = 0; k < n_spec; k++) t->special[k] = keys[k].id;
    t->n_special = n_spec;
    free(keys);

    t->pieces = malloc(t->blob_size + 1); /* a piece is never longer than its text */
    if (!t->pieces) return core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory", name);
    size_t pos = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n = make_piece(t, i, t->pieces + pos);
        t->v[i].poff = (uint32_t)pos;
        t->v[i].plen = (uint32_t)n;
        if ((int)n > t->max_piece) t->max_piece = (int)n;
        pos += n;
    }
    core_ok(st);
    return KVANT_OK;
}

/* ---- GGUF ------------------------------------------------------------------ */

static bool str_is(gguf_str s, const char *lit) {
    return s.len == strlen(lit) && memcmp(s.data, lit, s.len) == 0;
}

/* The pre-tokenizer named by tokenizer.ggml.pre ('default' when absent, as
 * llama.cpp does); NULL with st naming the file and the value when unknown. */
static tok_pre *open_pre(const gguf_ctx *g, const char *name, kvant_status *st) {
    gguf_str pre;
    if (!gguf_get_str(g, "tokenizer.ggml.pre", &pre)) {
        pre = (gguf_str){"default", 7};
        core_log(KVANT_LOG_WARN, "%s: no tokenizer.ggml.pre: using the 'default' pre-tokenizer, as llama.cpp does "
                 "(the text may split differently from the model's own tokenizer)", name);
    }
    tok_pre *p = tok_pre_new(pre.data, pre.len, 0, st);
    if (!p) {
        char msg[sizeof st->msg];
        snprintf(msg, sizeof msg, "%s", st->msg);
        core_fail(st, st->code, "%s: %s", name, msg);
    }
    return p;
}

/* A special id from key: the file's value when in range, else def (or -1
 * when def itself is out of range). */
static int read_id(const gguf_ctx *g, const char *key, int def, int n_vocab, const char *name) {
    if (def >= n_vocab) def = -1;
    uint32_t v;
    if (!gguf_get_u32(g, key, &v)) return def;
    if (v >= (uint32_t)n_vocab) {
        core_log(KVANT_LOG_WARN, "%s: %s = %u is outside the vocabulary (%d tokens), using %d", name, key,
                 v, n_vocab, def);
        return def;
    }
    return (int)v;
}

/* An optional per-token numeric array: NULL when absent; *bad when it is
 * present but unusable (wrong type or shorter than the vocabulary). */
static const gguf_value *per_token_arr(const gguf_ctx *g, const char *key, bool want_int, uint64_t n,
                                       bool *bad) {
    const gguf_value *v = gguf_find(g, key);
    *bad = false;
    if (!v) return NULL;
    bool ok = v->type == GGUF_ARRAY && v->arr.n >= n;
    if (ok) {
        gguf_vtype e = v->arr.elem;
        bool is_int = e <= GGUF_INT32 || e == GGUF_UINT64 || e == GGUF_INT64;
        bool is_float = e == GGUF_FLOAT32 || e == GGUF_FLOAT64;
        ok = want_int ? is_int : (is_int || is_float);
    }
    *bad = !ok;
    return ok ? v : NULL;
}

tok *tok_from_gguf(const gguf_ctx *g, kvant_status *st) {
    const char *name = gguf_path(g) ? gguf_path(g) : "gguf";
    gguf_str model;
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model)) {
        core_fail(st, KVANT_ERR_FORMAT, "%s: no tokenizer (tokenizer.ggml.model is missing)", name);
        return NULL;
    }
    tok_kind kind;
    if (str_is(model, "llama")) {
        kind = TOK_SPM;
    } else if (str_is(model, "gpt2")) {
        kind = TOK_GPT2;
    } else {
        core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tokenizer model '%.*s' is not supported (llama, gpt2)",
                  name, (int)(model.len > 64 ? 64 : model.len), model.data);
        return NULL;
    }

    const gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING);
    if (!toks || toks->arr.n == 0 || toks->arr.n > INT32_MAX / 2) {
        core_fail(st, KVANT_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing, empty or not a string array",
                  name);
        return NULL;
    }
    uint64_t n = toks->arr.n;
    bool bad_scores, bad_types;
    const gguf_value *scores = per_token_arr(g, "tokenizer.ggml.scores", false, n, &bad_scores);
    const gguf_value *types = per_token_arr(g, "tokenizer.ggml.token_type", true, n, &bad_types);
    if (bad_scores || bad_types) {
        core_fail(st, KVANT_ERR_FORMAT, "%s: tokenizer.ggml.%s is not a numeric array of %llu entries",
                  name, bad_scores ? "scores" : "token_type", (unsigned long long)n);
        return NULL;
    }
    const gguf_value *merges = NULL;
    if (kind == TOK_GPT2) {
        merges = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_STRING);
        if (!merges || merges->arr.n > INT32_MAX) {
            core_fail(st, KVANT_ERR_FORMAT, "%s: tokenizer.ggml.merges is missing or not a string array", name);
            return NULL;
        }
    }

    /* one blob: token texts, then merge strings, each NUL-terminated */
    uint64_t blob = 0;
    for (uint64_t i = 0; i < n; i++) blob += gguf_arr_str(toks, i).len + 1;
    for (uint64_t i = 0; merges && i < merges->arr.n; i++) blob += gguf_arr_str(merges, i).len + 1;
    if (blob >= UINT32_MAX) {
        core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tokenizer strings too large (%llu bytes)", name,
                  (unsigned long long)blob);
        return NULL;
    }

    tok *t = tok_new(kind, (int)n);
    if (t) t->blob = malloc(blob);
    if (!t || !t->blob) {
        tok_free(t);
        core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory for the vocabulary", name);
        return NULL;
    }
    t->blob_size = blob;
    size_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(toks, i);
        tok_entry *e = &t->v[i];
        memcpy(t->blob + pos, s.data, s.len);
        t->blob[pos + s.len] = 0;
        e->off = (uint32_t)pos;
        e->len = (uint32_t)s.len;
        pos += s.len + 1;
        e->score = scores ? (float)gguf_arr_f64(scores, i) : 0.0f;
        if (types) {
            int64_t ty = gguf_arr_i64(types, i);
            e->type = ty >= TOK_TYPE_NORMAL && ty <= TOK_TYPE_BYTE ? (uint8_t)ty : TOK_TYPE_UNDEFINED;
        } else { /* no types: byte tokens by their spelling (SPM), the rest normal */
            bool byte = kind == TOK_SPM && parse_byte_token(s.data, s.len) >= 0;
            e->type = byte ? TOK_TYPE_BYTE : TOK_TYPE_NORMAL;
        }
    }

    kvant_code rc = KVANT_OK;
    bool flag;
    if (kind == TOK_SPM) {
        t->bos = read_id(g, "tokenizer.ggml.bos_token_id", 1, t->n_vocab, name);
        t->eos = read_id(g, "tokenizer.ggml.eos_token_id", 2, t->n_vocab, name);
        t->unk = read_id(g, "tokenizer.ggml.unknown_token_id", 0, t->n_vocab, name);
        t->add_bos = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag) ? flag : true;
        t->add_space_prefix = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &flag) ? flag : true;
    } else {
        /* llama.cpp's BPE defaults: BOS = EOS = 11 (Falcon's), none for chatglm */
        t->pre = open_pre(g, name, st);
        gguf_str pn;
        if (t->pre && gguf_get_str(g, "tokenizer.ggml.pre", &pn))
            snprintf(t->pre_name, sizeof t->pre_name, "%.*s", (int)(pn.len < 63 ? pn.len : 63), pn.data);
        else if (t->pre)
            snprintf(t->pre_name, sizeof t->pre_name, "default");
        unsigned pf = t->pre ? tok_pre_flags(t->pre) : 0;
        t->bos = read_id(g, "tokenizer.ggml.bos_token_id", pf & TOK_PRE_NO_BOS ? -1 : 11, t->n_vocab, name);
        t->eos = read_id(g, "tokenizer.ggml.eos_token_id", 11, t->n_vocab, name);
        t->unk = read_id(g, "tokenizer.ggml.unknown_token_id", -1, t->n_vocab, name);
        t->add_bos = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag) ? flag : (pf & TOK_PRE_ADD_BOS) != 0;
        t->add_space_prefix = false;
        t->ignore_merges = (pf & TOK_PRE_IGNORE_MERGES) != 0;
        tok_bpe_init(t);
        if (!t->pre) rc = st->code;
        if (!rc && !tok_map_init(&t->merges, merges->arr.n))
            rc = core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory for the merges", name);
        for (uint64_t i = 0; !rc && i < merges->arr.n; i++) {
            gguf_str s = gguf_arr_str(merges, i);
            uint32_t off = (uint32_t)pos;
            memcpy(t->blob + pos, s.data, s.len);
            t->blob[pos + s.len] = 0;
            pos += s.len + 1;
            const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', s.len - 1) : NULL; /* "a b" */
            if (!sp) continue; /* not a merge: llama.cpp keys it as ("", "") which never matches */
            uint32_t a_len = (uint32_t)(sp - s.data);
            tok_map_put(&t->merges, t->blob, off, a_len, off + a_len + 1, (uint32_t)s.len - a_len - 1,
                        (int32_t)i);
        }
    }
    t->add_eos = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &flag) && flag && t->eos >= 0;
    t->add_bos = t->add_bos && t->bos >= 0;
    if (!rc) rc = tok_finish(t, g, name, st);
    if (rc) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* ---- llama2.c tokenizer.bin ------------------------------------------------
 * int32 max_token_length, then per token: float32 score, int32 len, len
 * bytes.  llama2.c's exporter wrote spaces where SentencePiece has U+2581
 * and "\n<s>\n" / "\n</s>\n" for BOS/EOS; both are undone here so that the
 * vocabulary reads like the GGUF one and the same encoder serves both. */

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The stored text of a token after normalisation: control tokens 0..2 lose
 * surrounding newlines/spaces; writes into dst when not NULL; returns its
 * length. */
static size_t l2c_text(const uint8_t *s, size_t n, int id, char *dst) {
    if (id <= 2) {
        while (n > 0 && (s[0] == '\n' || s[0] == ' ')) s++, n--;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
    }
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' && id > 2) {
            if (dst) memcpy(dst + out, SPM_SPACE, 3);
            out += 3;
        } else {
            if (dst) dst[out] = (char)s[i];
            out++;
        }
    }
    return out;
}

/* Walks the tokens of a mapped tokenizer.bin: validates every length against
 * the file (pass 1, dst NULL, returns the blob size needed) or copies them
 * into t (pass 2).  Returns UINT64_MAX after filling st. */
static uint64_t l2c_walk(const core_map *m, int vocab_size, tok *t, const char *path, kvant_status *st) {
    size_t pos = 4;
    uint64_t blob = 0;
    for (int i = 0; i < vocab_size; i++) {
        if (m->size - pos < 8) {
            core_fail(st, KVANT_ERR_FORMAT, "%s: truncated at token %d of %d (offset %zu of %zu bytes)", path, i,
                      vocab_size, pos, m->size);
            return UINT64_MAX;
        }
        uint32_t score_bits = rd_u32(m->data + pos);
        int32_t len = (int32_t)rd_u32(m->data + pos + 4);
        pos += 8;
        if (len < 0) {
            core_fail(st, KVANT_ERR_FORMAT, "%s: token %d has a negative length (%d)", path, i, (int)len);
            return UINT64_MAX;
        }
        if ((uint64_t)len > m->size - pos) {
            core_fail(st, KVANT_ERR_FORMAT, "%s: token %d length %d runs past the end of the file (%zu bytes)",
                      path, i, (int)len, m->size);
            return UINT64_MAX;
        }
        const uint8_t *s = m->data + pos;
        pos += (size_t)len;
        if (!t) {
            blob += l2c_text(s, (size_t)len, i, NULL) + 1;
            continue;
        }
        tok_entry *e = &t->v[i];
        e->off = (uint32_t)blob;
        e->len = (uint32_t)l2c_text(s, (size_t)len, i, t->blob + blob);
        t->blob[blob + e->len] = 0;
        blob += e->len + 1;
        memcpy(&e->score, &score_bits, sizeof e->score);
        e->type = i == 0 ? TOK_TYPE_UNKNOWN : i <= 2 ? TOK_TYPE_CONTROL
                : parse_byte_token(t->blob + e->off, e->len) >= 0 ? TOK_TYPE_BYTE : TOK_TYPE_NORMAL;
    }
    if (!t && pos < m->size)
        core_log(KVANT_LOG_DEBUG, "%s: %zu bytes after token %d ignored", path, m->size - pos, vocab_size);
    return blob;
}

tok *tok_from_llama2c(const char *path, int vocab_size, kvant_status *st) {
    if (vocab_size <= 0) {
        core_fail(st, KVANT_ERR_ARG, "%s: vocabulary size must be positive (got %d)", path, vocab_size);
        return NULL;
    }
    core_map m;
    if (core_map_file(path, &m, st)) return NULL;
    tok *t = NULL;
    if (m.size < 4) {
        core_fail(st, KVANT_ERR_FORMAT, "%s: too short for a llama2.c tokenizer (%zu bytes)", path, m.size);
        goto fail;
    }
    int32_t max_len = (int32_t)rd_u32(m.data);
    if (max_len < 0) {
        core_fail(st, KVANT_ERR_FORMAT, "%s: negative max_token_length (%d)", path, (int)max_len);
        goto fail;
    }
    if ((uint64_t)vocab_size * 8 > m.size - 4) { /* before allocating anything sized by vocab_size */
        core_fail(st, KVANT_ERR_FORMAT, "%s: %zu bytes cannot hold %d tokens (the model's vocabulary size)",
                  path, m.size, vocab_size);
        goto fail;
    }
    uint64_t blob = l2c_walk(&m, vocab_size, NULL, path, st);
    if (blob == UINT64_MAX) goto fail;
    if (blob >= UINT32_MAX) {
        core_fail(st, KVANT_ERR_UNSUPPORTED, "%s: tokenizer strings too large", path);
        goto fail;
    }
    t = tok_new(TOK_SPM, vocab_size);
    if (t) t->blob = malloc(blob + 1);
    if (!t || !t->blob) {
        core_fail(st, KVANT_ERR_NOMEM, "%s: out of memory for the vocabulary", path);
        goto fail;
    }
    t->blob_size = blob;
    l2c_walk(&m, vocab_size, t, path, st);
    core_unmap(&m);
    t->bos = vocab_size > 1 ? 1 : -1;
    t->eos = vocab_size > 2 ? 2 : -1;
    t->unk = 0;
    t->add_bos = t->bos >= 0;
    t->add_space_prefix = true;
    if (tok_finish(t, NULL, path, st)) {
        tok_free(t);
        return NULL;
    }
    return t;
fail:
    core_unmap(&m);
    tok_free(t);
    return NULL;
}
