/* cmd_chat.c - `kvant chat`: a conversation with a model in the terminal.
 *
 * Every turn renders the whole conversation with the model's chat template
 * (kvant_chat_render) and tokenizes it; what the KV cache already holds is
 * not computed again:
 *   paged (default): the cache is a paged pool with a prefix cache.  A turn
 *     starts a new sequence in it that takes every full block of identical
 *     tokens from the cache (kvant_seq_prefill_cached: the system prompt, the
 *     earlier turns, the replies generated into it) and prefills only the
 *     rest, then the previous sequence is freed.  A reply's tokens that the
 *     template re-tokenizes differently are simply recomputed from there.
 *     When the conversation no longer fits the context, the turn is refused
 *     with a message (nothing is cut silently); /reset starts over.
 *   --stream: a StreamingLLM cache (the first --sink tokens + the most recent
 *     ones, -c in all): the conversation never ends, the model forgets what
 *     left the window.  A turn forwards the new tokens when the cache holds
 *     a prefix of the rendered conversation, else it recomputes the sinks +
 *     the conversation's tail.
 * stdin may be a terminal (prompts, Ctrl-C stops a reply, Ctrl-D leaves) or
 * a pipe (no prompts; each line is a turn), so sessions can be scripted. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

static void chat_help(void) {
    printf("usage: kvant chat [-m MODEL] [--system TEXT] [options]\n"
           "\n"
           "A conversation with the model, through its chat template (detected from the\n"
           "GGUF's tokenizer.chat_template; models without one get the plain template).\n"
           "Replies stream as they are generated; the KV cache is kept between turns, so a\n"
           "turn computes only what is new (the prefix cache finds the rest).\n"
           "\n"
           "  -m, --model FILE       GGUF (v2/v3) or llama2.c checkpoint (default: the built-in stories260K)\n"
           "  -z, --tokenizer FILE   llama2.c tokenizer.bin (for .bin checkpoints)\n"
           "      --system TEXT      the system message\n"
           "      --chat-template NAME  this template instead of the model's: %s\n"
           "      --chat-template-file FILE  the template a Jinja file holds, found by its markers\n"
           "  -c, --ctx N            context in tokens (default: the training context, at most 4096)\n"
           "  -n, --n-predict N      most tokens per reply (default 1024)\n"
           "      --stream           StreamingLLM cache: when the conversation outgrows -c, keep the\n"
           "                         first --sink tokens and the most recent ones, and go on\n"
           "      --sink N           --stream: attention-sink tokens kept (default 4)\n"
           "      --kv-type T        KV cache element type: f16 (default), f32, q8_0\n"
           "      --ignore-eos       replies end only at -n, the context or Ctrl-C (not at end-of-turn)\n"
           "%s"
           "  -t, --threads N        threads (default: number of CPUs, %d here)\n"
           "  -h, --help             this text\n"
           "\n"
           "In the conversation: a line ending in \\ continues on the next line, and a line\n"
           "of \"\"\" starts or ends a block of lines; commands:\n"
           "  /reset        forget the conversation (the system message stays)\n"
           "  /save FILE    the transcript as JSON ({\"messages\": [{\"role\", \"content\"}, ...]})\n"
           "  /load FILE    continue a saved transcript\n"
           "  /stats        the last turn: prompt tokens (cached / computed), TTFT, tokens/s, KV in use\n"
           "  /help, /quit  (Ctrl-D leaves too; Ctrl-C stops the reply being written)\n"
           "stdin may be a pipe: then each line (or block) is a turn, replies go to stdout\n"
           "one per line, and nothing else is printed there but /stats.\n",
           kvant_chat_template_list(), cli_sampling_help, kvant_default_threads());
}

/* ---- the conversation ------------------------------------------------------------ */
typedef struct {
    kvant_chat_msg *m;      /* role and content malloc'd */
    int n, cap;
} conv;

static bool conv_add(conv *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 16;
        kvant_chat_msg *m = realloc(c->m, (size_t)cap * sizeof *m);
        if (!m) return false;
        c->m = m;
        c->cap = cap;
    }
    char *r = strdup(role), *t = strdup(content);
    if (!r || !t) {
        free(r), free(t);
        return false;
    }
    c->m[c->n++] = (kvant_chat_msg){r, t};
    return true;
}

static void conv_pop(conv *c) {
    c->n--;
    free((char *)c->m[c->n].role);
    free((char *)c->m[c->n].content);
}

static void conv_clear(conv *c, int keep) {
    while (c->n > keep) conv_pop(c);
}

/* ---- the session ------------------------------------------------------------------- */
typedef struct {
    int n_prompt, n_cached, n_computed, n_gen;
    double ttft_ms, prefill_ms, decode_ms;
    bool recomputed;        /* --stream: the cache was rebuilt from the tail */
} turn_stats;

typedef struct {
    const char *model_path, *tokenizer, *system, *tmpl_name;
    int n_ctx, n_predict, sink, threads;
    bool stream, seed_set, ignore_eos;
    kvant_kv_type kv_type;
    kvant_sampling samp;
    /* state */
    kvant_model *m;
    kvant_model_info info;
    kvant_chat_template tmpl;
    kvant_kv_pool *pool;    /* paged mode */
    kvant_seq *seq;
    int32_t *hist;          /* the tokens the cache holds, in order (--stream: as forwarded) */
    int n_hist, cap_hist;
    float *logits;
    conv c;
    int n_system;           /* messages /reset keeps */
    int turns;
    turn_stats last;
    bool tty;
} chat;

static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

static bool hist_reserve(chat *s, int n) {
    if (n <= s->cap_hist) return true;
    int cap = s->cap_hist ? s->cap_hist : 256;
    while (cap < n) cap *= 2;
    int32_t *h = realloc(s->hist, (size_t)cap * sizeof *h);
    if (!h) return false;
    s->hist = h;
    s->cap_hist = cap;
    return true;
}

/* the rendered conversation's tokens (malloc'd, *n), or NULL after a message */
static int32_t *render_tokens(chat *s, int *n) {
    kvant_status st;
    char *text = kvant_chat_render(s->tmpl, s->c.m, s->c.n, true, &st);
    if (!text) {
        fprintf(stderr, "kvant chat: %s\n", st.msg);
        return NULL;
    }
    const size_t len = strlen(text);
    int cap = (int)(len < INT_MAX / 2 ? len : INT_MAX / 2) + 8;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    int k = t ? kvant_chat_tokenize(s->m, text, len, t, cap) : INT_MIN;
    if (k < 0 && k != INT_MIN) { /* byte fallback: more tokens than bytes */
        cap = -k;
        int32_t *u = realloc(t, (size_t)cap * sizeof *u);
        k = u ? kvant_chat_tokenize(s->m, text, len, t = u, cap) : INT_MIN;
    }
    free(text);
    if (k < 0) {
        fprintf(stderr, "kvant chat: out of memory tokenizing the conversation\n");
        free(t);
        return NULL;
    }
    *n = k;
    return t;
}

/* the tokens of the conversation the cache stands for: hist[0..n_hist) (with
 * --stream, some of the middle may have left the cache) */
static bool hist_set(chat *s, const int32_t *t, int n) {
    if (!hist_reserve(s, n)) return false;
    memmove(s->hist, t, (size_t)n * sizeof *t);
    s->n_hist = n;
    return true;
}

static kvant_code fwd(chat *s, const int32_t *t, int n, kvant_status *st) {
    return n > 0 ? kvant_forward(s->seq, t, n, s->logits, false, st) : KVANT_OK;
}

/* paged: a new sequence takes the cached blocks of toks' prefix, prefills the rest */
static kvant_code prefill_paged(chat *s, const int32_t *toks, int n, kvant_status *st) {
    const kvant_seq_params sp = {.pool = s->pool};
    kvant_seq *ns = kvant_seq_new_ex(s->m, &sp, st);
    if (!ns) return st->code;
    const int k = kvant_seq_prefill_cached(ns, toks, n);
    kvant_seq_free(s->seq); /* after the match: its blocks were still held, none could be evicted */
    s->seq = ns;
    s->last.n_cached = k;
    s->last.n_computed = n - k;
    if (!hist_set(s, toks, n)) return KVANT_ERR_NOMEM;
    return fwd(s, toks + k, n - k, st);
}

/* --stream: forward what is new, or rebuild the cache from the sinks + the tail */
static kvant_code prefill_stream(chat *s, const int32_t *toks, int n, kvant_status *st) {
    int p = 0;
    while (p < s->n_hist && p < n && s->hist[p] == toks[p]) p++;
    kvant_code rc;
    if (p == s->n_hist && p < n) {
        s->last.n_cached = p;
        s->last.n_computed = n - p;
        rc = fwd(s, toks + p, n - p, st);
    } else { /* the template rewrote earlier text, or a reply re-tokenizes differently */
        kvant_seq_reset(s->seq);
        s->last.recomputed = true;
        const int head = n < s->sink ? n : s->sink;
        int room = s->n_ctx - head - s->n_ctx / 4; /* a quarter of the cache left for the reply */
        if (room < 1) room = 1;
        const int tail = n - head < room ? n - head : room;
        s->last.n_cached = 0;
        s->last.n_computed = head + tail;
        rc = fwd(s, toks, head, st);
        if (!rc) rc = fwd(s, toks + n - tail, tail, st);
    }
    return rc ? rc : hist_set(s, toks, n) ? KVANT_OK : KVANT_ERR_NOMEM;
}

static void print_reply_end(const chat *s, const char *why) {
    if (why && s->tty) printf(" [%s]", why);
    else if (why) fprintf(stderr, "kvant chat: [%s]\n", why);
    fputc('\n', stdout);
    fflush(stdout);
}

/* trims ASCII whitespace at both ends in place (the templates put their own
 * separators around a message) */
static char *trim(char *t) {
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\n' || t[n - 1] == '\t' || t[n - 1] == '\r')) t[--n] = 0;
    size_t i = 0;
    while (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r') i++;
    memmove(t, t + i, n - i + 1);
    return t;
}

/* one user turn: prompt, reply streamed to stdout, reply added to the
 * conversation.  false only on a failure that ends the session. */
static bool turn(chat *s, const char *user) {
    kvant_status st;
    if (!conv_add(&s->c, "user", user)) return false;
    int n;
    int32_t *toks = render_tokens(s, &n);
    if (!toks) {
        conv_pop(&s->c);
        return true;
    }
    if (!s->stream && n + 1 > s->n_ctx) {
        fprintf(stderr,
                "kvant chat: the conversation (%d tokens with this message) does not fit the context of %d "
                "tokens; /reset starts over, -c N gives more room, --stream keeps the most recent tokens\n",
                n, s->n_ctx);
        conv_pop(&s->c);
        free(toks);
        if (!s->tty) print_reply_end(s, NULL); /* one line per turn on a pipe */
        return true;
    }
    s->last = (turn_stats){.n_prompt = n};
    const double t0 = kvant_time_ms();
    kvant_code rc = s->stream ? prefill_stream(s, toks, n, &st) : prefill_paged(s, toks, n, &st);
    free(toks);
    if (rc) {
        fprintf(stderr, "kvant chat: %s\n", rc == KVANT_ERR_NOMEM ? "out of memory" : st.msg);
        return false;
    }
    s->last.prefill_ms = kvant_time_ms() - t0;
    kvant_sampling sp = s->samp;
    sp.seed += (uint64_t)s->turns++;
    kvant_sampler *smp = kvant_sampler_new(&sp, s->info.vocab_size, &st);
    if (!smp) return false;
    const int from = s->n_hist > sp.repeat_last_n ? s->n_hist - sp.repeat_last_n : 0;
    for (int i = from; i < s->n_hist; i++) kvant_sampler_accept(smp, s->hist[i]);

    size_t cap = 256, len = 0;
    char *reply = malloc(cap), piece[256];
    const char *why = NULL;
    const double t1 = kvant_time_ms();
    g_interrupt = 0;
    for (int g = 0; reply; g++) {
        if (g == s->n_predict) { why = "reply limit: -n"; break; }
        if (!s->stream && kvant_seq_pos(s->seq) + 1 > s->n_ctx) { why = "context full: /reset or -c N"; break; }
        const int32_t next = kvant_sampler_sample(smp, s->logits);
        if (g == 0) s->last.ttft_ms = kvant_time_ms() - t0;
        if (kvant_token_is_eog(s->m, next) && !s->ignore_eos) break;
        kvant_sampler_accept(smp, next);
        const int k = kvant_token_to_piece(s->m, s->hist[s->n_hist - 1], next, piece, sizeof piece);
        fwrite(piece, 1, (size_t)k, stdout);
        fflush(stdout);
        if (len + (size_t)k + 1 > cap) {
            char *r = realloc(reply, cap = 2 * (len + (size_t)k + 1));
            if (!r) break;
            reply = r;
        }
        memcpy(reply + len, piece, (size_t)k);
        len += (size_t)k;
        s->last.n_gen++;
        if (!hist_reserve(s, s->n_hist + 1)) break;
        s->hist[s->n_hist++] = next;
        if (fwd(s, &next, 1, &st)) {
            fprintf(stderr, "\nkvant chat: %s\n", st.msg);
            free(reply);
            kvant_sampler_free(smp);
            return false;
        }
        if (g_interrupt) { why = "stopped"; break; }
    }
    s->last.decode_ms = kvant_time_ms() - t1;
    kvant_sampler_free(smp);
    print_reply_end(s, why);
    if (!reply) return false;
    reply[len] = 0;
    const bool ok = conv_add(&s->c, "assistant", trim(reply));
    free(reply);
    return ok;
}

/* ---- commands ------------------------------------------------------------------------ */
static void cmd_stats(const chat *s) {
    const turn_stats *t = &s->last;
    if (!s->turns) {
        printf("no turn yet\n");
        return;
    }
    printf("turn %d: prompt %d tokens (%d %s, %d computed%s), reply %d tokens\n", s->turns, t->n_prompt, t->n_cached,
           s->stream ? "already forwarded" : "from the cache", t->n_computed,
           t->recomputed ? ", cache rebuilt from the sinks and the tail" : "", t->n_gen);
    printf("TTFT %.1f ms, prefill %.0f tokens/s, decode %.1f tokens/s\n", t->ttft_ms,
           t->prefill_ms > 0 ? t->n_computed * 1e3 / t->prefill_ms : 0.0,
           t->decode_ms > 0 ? t->n_gen * 1e3 / t->decode_ms : 0.0);
    kvant_kv_stats kv;
    kvant_seq_kv_stats(s->seq, &kv);
    printf("context %d of %d tokens%s; KV %zu bytes in use", kvant_seq_pos(s->seq), s->n_ctx,
           s->stream ? " (streaming: sinks + the most recent)" : "", kv.bytes_used);
    if (kv.paged)
        printf(" (%lld blocks of %d tokens used, %lld cached, %lld free; %lld tokens from the prefix cache so far)",
               (long long)kv.blocks_used, kv.block_size, (long long)kv.blocks_cached, (long long)kv.blocks_free,
               (long long)kv.prefix_hit_tokens);
    printf("\n");
    fflush(stdout);
}

static void cmd_save(const chat *s, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", s->info.name ? s->info.name : "");
    cJSON_AddStringToObject(root, "template", kvant_chat_template_name(s->tmpl));
    cJSON *msgs = cJSON_AddArrayToObject(root, "messages");
    for (int i = 0; i < s->c.n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", s->c.m[i].role);
        cJSON_AddStringToObject(m, "content", s->c.m[i].content);
        cJSON_AddItemToArray(msgs, m);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    const bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f)) f = NULL;
    free(text);
    if (ok && f) fprintf(stderr, "kvant chat: saved %d messages to %s\n", s->c.n, path);
    else fprintf(stderr, "kvant chat: cannot write %s: %s\n", path, strerror(errno));
}

static void cmd_load(chat *s, const char *path) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "kvant chat: cannot read %s\n", path);
        return;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    conv c = {0};
    bool ok = cJSON_IsArray(msgs);
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"), *t = cJSON_GetObjectItemCaseSensitive(m, "content");
        ok = ok && cJSON_IsString(r) && cJSON_IsString(t) &&
             (!strcmp(r->valuestring, "system") || !strcmp(r->valuestring, "user") ||
              !strcmp(r->valuestring, "assistant")) &&
             conv_add(&c, r->valuestring, t->valuestring);
        if (!ok) break;
    }
    cJSON_Delete(root);
    if (!ok) {
        fprintf(stderr, "kvant chat: %s is not a transcript ({\"messages\": [{\"role\": system|user|assistant, "
                        "\"content\": text}, ...]}); the conversation is unchanged\n", path);
        conv_clear(&c, 0);
        free(c.m);
        return;
    }
    conv_clear(&s->c, 0);
    free(s->c.m);
    s->c = c;
    s->n_system = c.n > 0 && !strcmp(c.m[0].role, "system");
    fprintf(stderr, "kvant chat: loaded %d messages from %s (the next turn computes what the cache lacks)\n", c.n,
            path);
}

/* ---- input: lines, "\" continuations, """ blocks ---------------------------------------- */
/* The next turn or command (malloc'd, lines joined by newlines), or NULL at
 * the end of input.  Ctrl-C at the prompt gives back an empty string. */
static char *read_turn(chat *s) {
    char *line = NULL, *buf = NULL;
    size_t lcap = 0, len = 0;
    int lines = 0;
    bool block = false;
    if (s->tty) printf("> "), fflush(stdout);
    for (;;) {
        errno = 0;
        g_interrupt = 0;
        ssize_t k = getline(&line, &lcap, stdin);
        if (k < 0) {
            const bool intr = errno == EINTR || g_interrupt;
            free(line);
            if (intr) { /* Ctrl-C at the prompt: a fresh one */
                clearerr(stdin);
                printf("\n(Ctrl-D or /quit leaves)\n");
                free(buf);
                return strdup("");
            }
            if (lines) return buf; /* the last turn had no newline, or a block was not closed */
            free(buf);
            return NULL;
        }
        if (k && line[k - 1] == '\n') line[--k] = 0;
        if (k && line[k - 1] == '\r') line[--k] = 0;
        if (!strcmp(line, "\"\"\"")) {
            if (block) break;
            block = true;
            if (s->tty) printf(". "), fflush(stdout);
            continue;
        }
        const bool cont = !block && k && line[k - 1] == '\\';
        if (cont) line[--k] = 0;
        char *b = realloc(buf, len + (size_t)k + 2);
        if (!b) break;
        buf = b;
        if (lines++) buf[len++] = '\n';
        memcpy(buf + len, line, (size_t)k);
        len += (size_t)k;
        buf[len] = 0;
        if (!block && !cont) break;
        if (s->tty) printf(". "), fflush(stdout);
    }
    free(line);
    return buf ? buf : strdup("");
}

/* ---- main ------------------------------------------------------------------------------- */
static int parse(int argc, char **argv, chat *s) {
    cli_args a = {argc, 1, argv, "kvant chat", false};
    const char *tmpl_file = NULL;
    *s = (chat){.n_predict = 1024, .sink = 4, .samp = kvant_sampling_default()};
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { chat_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) s->model_path = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) s->tokenizer = cli_str(&a);
        else if (cli_is(&a, "--system", NULL)) s->system = cli_str(&a);
        else if (cli_is(&a, "--chat-template", NULL)) s->tmpl_name = cli_str(&a);
        else if (cli_is(&a, "--chat-template-file", NULL)) tmpl_file = cli_str(&a);
        else if (cli_is(&a, "-c", "--ctx")) s->n_ctx = cli_int(&a, 16, 1 << 22);
        else if (cli_is(&a, "-n", "--n-predict")) s->n_predict = cli_int(&a, 1, 1 << 24);
        else if (cli_is(&a, "--stream", NULL)) s->stream = true;
        else if (cli_is(&a, "--ignore-eos", NULL)) s->ignore_eos = true;
        else if (cli_is(&a, "--sink", NULL)) s->sink = cli_int(&a, 0, 1 << 16);
        else if (cli_is(&a, "--kv-type", NULL)) s->kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_sampling_flag(&a, &s->samp, &s->seed_set)) {}
        else if (cli_is(&a, "-t", "--threads")) s->threads = cli_int(&a, 1, 1024);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (tmpl_file && !s->tmpl_name && !(s->tmpl_name = cli_chat_template_file("kvant chat", tmpl_file)))
        return CLI_USAGE;
    kvant_status st;
    if (s->tmpl_name && kvant_chat_template_by_name(s->tmpl_name, &s->tmpl, &st)) {
        fprintf(stderr, "kvant chat: --chat-template: %s\n", st.msg);
        return CLI_USAGE;
    }
    if (!s->seed_set) s->samp.seed = (uint64_t)time(NULL);
    return -1;
}

static int open_session(chat *s) {
    kvant_status st;
    if (!s->model_path) cli_note_builtin_model("kvant chat");
    const kvant_model_params mp = {.tokenizer_path = s->tokenizer, .n_threads = s->threads};
    if (!(s->m = kvant_model_open(s->model_path, &mp, &st))) {
        fprintf(stderr, "kvant chat: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    kvant_model_get_info(s->m, &s->info);
    if (!s->tmpl_name) s->tmpl = kvant_chat_detect(s->m);
    if (!s->n_ctx) s->n_ctx = s->info.n_ctx_train < 4096 ? s->info.n_ctx_train : 4096;
    if (s->stream && s->sink >= s->n_ctx / 2) {
        fprintf(stderr, "kvant chat: --sink %d leaves no window in a context of %d\n", s->sink, s->n_ctx);
        return CLI_USAGE;
    }
    if (s->stream) {
        kvant_seq_params sp = kvant_seq_default();
        sp.kv_type = s->kv_type;
        sp.sink = s->sink;
        sp.window = s->n_ctx - s->sink;
        s->seq = kvant_seq_new_ex(s->m, &sp, &st);
    } else {
        /* room for two sequences that share all but a few blocks (a turn's new
         * sequence is made before the old one is freed), and cached blocks */
        const int B = 16, blocks = (s->n_ctx + B - 1) / B;
        const kvant_kv_pool_params pp = {.kv_type = s->kv_type, .block_size = B, .n_blocks = blocks + blocks / 2 + 4,
                                         .max_ctx = s->n_ctx, .max_seqs = 2, .prefix_cache = true};
        if ((s->pool = kvant_kv_pool_new(s->m, &pp, &st))) {
            const kvant_seq_params sp = {.pool = s->pool};
            s->seq = kvant_seq_new_ex(s->m, &sp, &st);
        }
    }
    s->logits = malloc((size_t)s->info.vocab_size * sizeof *s->logits);
    if (!s->seq || !s->logits) {
        fprintf(stderr, "kvant chat: %s\n", s->seq ? "out of memory" : st.msg);
        return CLI_FAIL;
    }
    if (s->system && !conv_add(&s->c, "system", s->system)) return CLI_FAIL;
    s->n_system = s->c.n;
    fprintf(stderr, "kvant chat: %s (%s), chat template %s, context %d tokens%s; /help for commands\n",
            s->info.name ? s->info.name : "model", s->info.arch, kvant_chat_template_name(s->tmpl), s->n_ctx,
            s->stream ? " (streaming: sinks + the most recent)" : "");
    return -1;
}

static void close_session(chat *s) {
    kvant_seq_free(s->seq);
    kvant_kv_pool_free(s->pool);
    kvant_model_free(s->m);
    conv_clear(&s->c, 0);
    free(s->c.m);
    free(s->hist);
    free(s->logits);
}

int cmd_chat(int argc, char **argv) {
    chat s;
    int rc = parse(argc, argv, &s);
    if (rc >= 0) return rc;
    s.tty = isatty(0) && isatty(1);
    if ((rc = open_session(&s)) >= 0) {
        close_session(&s);
        return rc;
    }
    struct sigaction sa = {.sa_handler = on_sigint}; /* no SA_RESTART: Ctrl-C interrupts a blocked read */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    rc = CLI_OK;
    for (char *in; (in = read_turn(&s)); free(in)) {
        if (!in[0]) continue;
        if (in[0] == '/') {
            char *arg = strchr(in, ' ');
            if (arg) *arg++ = 0;
            while (arg && *arg == ' ') arg++;
            if (!strcmp(in, "/quit") || !strcmp(in, "/exit")) { free(in); break; }
            else if (!strcmp(in, "/reset")) {
                conv_clear(&s.c, s.n_system);
                if (s.stream) kvant_seq_reset(s.seq), s.n_hist = 0;
                fprintf(stderr, "kvant chat: the conversation is forgotten%s\n", s.n_system ? " (the system message stays)" : "");
            } else if (!strcmp(in, "/stats")) cmd_stats(&s);
            else if (!strcmp(in, "/save") && arg && *arg) cmd_save(&s, arg);
            else if (!strcmp(in, "/load") && arg && *arg) cmd_load(&s, arg);
            else if (!strcmp(in, "/help")) chat_help();
            else fprintf(stderr, "kvant chat: unknown command %s%s (/reset, /save FILE, /load FILE, /stats, /quit)\n", in,
                         (!strcmp(in, "/save") || !strcmp(in, "/load")) ? " without FILE" : "");
            continue;
        }
        if (!turn(&s, in)) { rc = CLI_FAIL; free(in); break; }
    }
    if (s.tty) printf("\n");
    close_session(&s);
    return rc;
}
