/* cmd_run.c - `kvant run`: one sequence, prefill then decode, streamed.
 * Stdout carries only the generated text; stderr ends with the stats. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "cli/int8_flags.h"

static void run_help(void) {
    printf("usage: kvant run [-m MODEL] [options]\n"
           "\n"
           "Generates a continuation of PROMPT and streams it to stdout (no prompt echo);\n"
           "statistics go to stderr.\n"
           "\n"
           "  -m, --model FILE       GGUF (v2/v3) or llama2.c checkpoint (default: the built-in stories260K)\n"
           "  -z, --tokenizer FILE   llama2.c tokenizer.bin (for .bin checkpoints;\n"
           "                         default: tokenizer.bin beside the model)\n"
           "  -p, --prompt TEXT      prompt (default: empty, generation starts from BOS)\n"
           "      --chat             PROMPT is one user turn: rendered with the model's chat template\n"
           "                         (detected from its tokenizer.chat_template), generation stops\n"
           "                         at the end of the assistant's turn\n"
           "      --system TEXT      with --chat: a system message before the user turn (implies --chat)\n"
           "      --chat-template NAME  this template instead of the model's (implies --chat):\n"
           "                         %s\n"
           "      --chat-template-file FILE  the template a Jinja file holds, found by its markers\n"
           "                         as in a model (implies --chat)\n"
           "  -n, --n-predict N      tokens to generate (default 128)\n"
           "  -c, --ctx N            context size in tokens (default: prompt + N)\n"
           "%s"
           "  -t, --threads N        threads (default: number of CPUs, %d here)\n"
           "      --no-cache         recompute the whole prefix for every token (no KV cache)\n"
           "      --attn A           attention kernel: flash (default) or naive (the reference)\n"
           "      --kv K             KV cache: paged (default) or contiguous (the reference)\n"
           "      --kv-type T        KV cache element type: f16 (default), f32, q8_0\n"
           "      --kv-mem MiB       paged: size the block pool from this budget (default: the context)\n"
           "      --block-size N     paged: tokens per block (default 16)\n"
           "      --sink N           StreamingLLM: keep the first N tokens (attention sinks) ...\n"
           "      --window W         ... and the last W tokens: generation runs in constant memory\n"
           "      --ignore-eos       keep generating after the end-of-sequence token\n"
           "      --report-every N   every N generated tokens, print tokens/s over them, KV bytes\n"
           "                         and peak resident memory to stderr\n"
           "  -h, --help             this text\n",
           kvant_chat_template_list(), cli_sampling_help, kvant_default_threads());
    cli_int8_help();
}

typedef struct {
    const char *model, *tokenizer, *prompt;
    bool chat;                      /* --chat: prompt (+ system) rendered with a chat template */
    const char *system, *chat_template;
    int n_predict, n_ctx, threads, report_every;
    bool no_cache, ignore_eos, seed_set;
    kvant_sampling samp;
    kvant_seq_params seq;
    cli_int8 i8;
} run_opts;

/* returns -1 to continue, or an exit code */
static int parse(int argc, char **argv, run_opts *o) {
    cli_args a = {argc, 1, argv, "kvant run", false};
    const char *tmpl_file = NULL;
    *o = (run_opts){.prompt = "", .n_predict = 128, .samp = kvant_sampling_default(), .seq = kvant_seq_default()};
    cli_int8_init(&o->i8);
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { run_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) o->model = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) o->tokenizer = cli_str(&a);
        else if (cli_is(&a, "-p", "--prompt")) o->prompt = cli_str(&a);
        else if (cli_is(&a, "--chat", NULL)) o->chat = true;
        else if (cli_is(&a, "--system", NULL)) { o->system = cli_str(&a); o->chat = true; }
        else if (cli_is(&a, "--chat-template", NULL)) { o->chat_template = cli_str(&a); o->chat = true; }
        else if (cli_is(&a, "--chat-template-file", NULL)) { tmpl_file = cli_str(&a); o->chat = true; }
        else if (cli_is(&a, "-n", "--n-predict")) o->n_predict = cli_int(&a, 0, 1 << 24);
        else if (cli_is(&a, "-c", "--ctx")) o->n_ctx = cli_int(&a, 1, 1 << 24);
        else if (cli_sampling_flag(&a, &o->samp, &o->seed_set)) {}
        else if (cli_is(&a, "-t", "--threads")) o->threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "--no-cache", NULL)) o->no_cache = true;
        else if (cli_is(&a, "--ignore-eos", NULL)) o->ignore_eos = true;
        else if (cli_is(&a, "--report-every", NULL)) o->report_every = cli_int(&a, 1, 1 << 30);
        else if (cli_is(&a, "--attn", NULL)) o->seq.attn = (kvant_attn)cli_choice_arg(&a, cli_attns);
        else if (cli_is(&a, "--kv", NULL)) o->seq.kv = (kvant_cache)cli_choice_arg(&a, cli_caches);
        else if (cli_is(&a, "--kv-type", NULL)) o->seq.kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_is(&a, "--kv-mem", NULL)) o->seq.kv_mem_mib = cli_float(&a, 0.001f, 1e7f);
        else if (cli_is(&a, "--block-size", NULL)) o->seq.block_size = cli_int(&a, 1, 4096);
        else if (cli_is(&a, "--sink", NULL)) o->seq.sink = cli_int(&a, 0, 1 << 20);
        else if (cli_is(&a, "--window", NULL)) o->seq.window = cli_int(&a, 1, 1 << 22);
        else if (cli_int8_flag(&a, &o->i8)) {}
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!o->model) cli_note_builtin_model("kvant run");
    kvant_status st;
    kvant_chat_template t;
    if (tmpl_file && !o->chat_template && !(o->chat_template = cli_chat_template_file("kvant run", tmpl_file))) return CLI_USAGE;
    if (o->chat_template && kvant_chat_template_by_name(o->chat_template, &t, &st)) {
        fprintf(stderr, "kvant run: --chat-template: %s\n", st.msg);
        return CLI_USAGE;
    }
    if (!o->seed_set) o->samp.seed = (uint64_t)time(NULL);
    if (o->seq.sink && !o->seq.window) {
        fprintf(stderr, "kvant run: --sink needs --window (see --help)\n");
        return CLI_USAGE;
    }
    if (o->seq.window && o->no_cache) {
        fprintf(stderr, "kvant run: --no-cache and --window do not mix\n");
        return CLI_USAGE;
    }
    return -1;
}

typedef struct {
    int n_prompt, n_gen;
    double t_start, t_first, t_end; /* ms */
    size_t kv_bytes;
    int64_t evicted;
    kvant_kv_stats kv;
} run_stats;

static void print_stats(const run_opts *o, const run_stats *s) {
    const double ttft = s->t_first - s->t_start;
    const double decode_ms = s->t_end - s->t_first;
    const int n_dec = s->n_gen > 1 ? s->n_gen - 1 : 0;
    fprintf(stderr, "\n--- stats ---\n");
    fprintf(stderr, "prompt tokens:     %d\n", s->n_prompt);
    fprintf(stderr, "generated tokens:  %d\n", s->n_gen);
    fprintf(stderr, "TTFT:              %.2f ms\n", ttft);
    fprintf(stderr, "prefill:           %.1f tokens/s\n", ttft > 0 ? s->n_prompt * 1e3 / ttft : 0.0);
    fprintf(stderr, "TPOT:              %.3f ms\n", n_dec ? decode_ms / n_dec : 0.0);
    fprintf(stderr, "decode:            %.1f tokens/s\n", decode_ms > 0 ? n_dec * 1e3 / decode_ms : 0.0);
    fprintf(stderr, "KV cache in use:   %zu bytes (%.2f MiB)%s\n", s->kv_bytes, s->kv_bytes / 1048576.0,
            o->no_cache ? " [--no-cache: recomputed every step]" : "");
    if (s->kv.paged)
        fprintf(stderr, "KV blocks:         %lld total, %lld used, %lld cached, %lld free (%d tokens, %zu bytes each); "
                        "%lld reserved-but-unused slots; %lld prefix-cache hit tokens\n",
                (long long)s->kv.blocks_total, (long long)s->kv.blocks_used, (long long)s->kv.blocks_cached,
                (long long)s->kv.blocks_free, s->kv.block_size, s->kv.bytes_per_block, (long long)s->kv.frag_tokens,
                (long long)s->kv.prefix_hit_tokens);
    if (s->kv.swa_blocks_total)
        fprintf(stderr, "KV sliding window: the local layers' own pool: %lld of %lld blocks used (%.2f of %.2f MiB); "
                        "blocks older than the window are given back\n",
                (long long)s->kv.swa_blocks_used, (long long)s->kv.swa_blocks_total, s->kv.swa_bytes_used / 1048576.0,
                s->kv.swa_bytes_total / 1048576.0);
    fprintf(stderr, "KV cache:          %s, %s, %s attention", o->seq.window ? "streaming" : cli_choice_name(cli_caches, o->seq.kv),
            cli_choice_name(cli_kv_types, o->seq.kv_type), cli_choice_name(cli_attns, o->seq.attn));
    if (o->seq.window) fprintf(stderr, ", sink %d + window %d, %lld tokens evicted", o->seq.sink, o->seq.window,
                               (long long)s->evicted);
    fprintf(stderr, "\n");
    fprintf(stderr, "sampling:          %s, seed %llu\n", o->samp.temperature > 0 ? "stochastic" : "greedy",
            (unsigned long long)o->samp.seed);
}

/* --chat: [system,] user as the model's (or --chat-template's) chat prompt,
 * ending where the assistant's reply begins; NULL after a message */
static char *chat_prompt(const run_opts *o, const kvant_model *m) {
    kvant_status st;
    kvant_chat_template t = kvant_chat_detect(m);
    if (o->chat_template) kvant_chat_template_by_name(o->chat_template, &t, &st); /* checked in parse */
    kvant_chat_msg msgs[2];
    int n = 0;
    if (o->system) msgs[n++] = (kvant_chat_msg){"system", o->system};
    msgs[n++] = (kvant_chat_msg){"user", o->prompt};
    char *text = kvant_chat_render(t, msgs, n, true, &st);
    if (!text) fprintf(stderr, "kvant run: %s\n", st.msg);
    else fprintf(stderr, "kvant run: chat template %s%s\n", kvant_chat_template_name(t),
                 o->chat_template ? " (--chat-template)" : "");
    return text;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;

    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = o.tokenizer, .n_threads = o.threads};
    kvant_model *m = kvant_model_open(o.model, &mp, &st);
    if (!m) {
        fprintf(stderr, "kvant run: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    kvant_model_info info;
    kvant_model_get_info(m, &info);

    /* prompt tokens: BOS + the text (SentencePiece adds the leading space);
     * --chat: the chat template's text, its special tokens parsed, BOS once */
    char *chat_text = o.chat ? chat_prompt(&o, m) : NULL;
    const char *ptext = o.chat ? chat_text : o.prompt;
    const size_t plen = ptext ? strlen(ptext) : 0;
    int cap = (int)plen + 8;
    int32_t *tokens = malloc((size_t)(cap + o.n_predict) * sizeof *tokens);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    kvant_seq *seq = NULL;
    kvant_sampler *smp = NULL;
    kvant_int8 *q8 = NULL;
    rc = CLI_FAIL;
    if (!tokens || !logits || !ptext) goto done;
    int n_prompt = o.chat ? kvant_chat_tokenize(m, ptext, plen, tokens, cap) : kvant_tokenize(m, ptext, plen, true, tokens, cap);
    if (n_prompt < 0 && n_prompt != INT_MIN) { /* byte fallback: more tokens than bytes; -n_prompt is the count */
        cap = -n_prompt;
        int32_t *t = realloc(tokens, (size_t)(cap + o.n_predict) * sizeof *tokens);
        if (!t) goto done;
        tokens = t;
        n_prompt = o.chat ? kvant_chat_tokenize(m, ptext, plen, tokens, cap) : kvant_tokenize(m, ptext, plen, true, tokens, cap);
    }
    if (n_prompt <= 0) {
        fprintf(stderr, "kvant run: cannot tokenize the prompt\n");
        goto done;
    }
    const int n_ctx = o.n_ctx ? o.n_ctx : n_prompt + o.n_predict;
    if (!o.seq.window && n_prompt + o.n_predict > n_ctx) {
        fprintf(stderr, "kvant run: prompt (%d tokens) + %d new tokens do not fit the context of %d\n", n_prompt,
                o.n_predict, n_ctx);
        rc = CLI_USAGE;
        goto done;
    }
    if (!o.seq.window && n_ctx > info.n_ctx_train)
        fprintf(stderr, "kvant run: warning: context %d exceeds the training context %d\n", n_ctx, info.n_ctx_train);
    o.seq.n_ctx = n_ctx;
    if (!(seq = kvant_seq_new_ex(m, &o.seq, &st)) || !(smp = kvant_sampler_new(&o.samp, info.vocab_size, &st))) {
        fprintf(stderr, "kvant run: %s\n", st.msg);
        rc = st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
        goto done;
    }
    if ((rc = cli_int8_build(&o.i8, m, "kvant run", &q8)) != CLI_OK) goto done;
    rc = CLI_FAIL;
    cli_int8_describe(&o.i8, q8, "kvant run");
    if (q8 && kvant_seq_use_int8(seq, q8, &st)) goto fwd_fail;
    for (int i = 0; i < n_prompt; i++) kvant_sampler_accept(smp, tokens[i]);

    run_stats s = {.n_prompt = n_prompt};
    s.t_start = kvant_time_ms();
    int n = n_prompt; /* tokens in the sequence so far */
    if (kvant_forward(seq, tokens, n_prompt, logits, false, &st)) goto fwd_fail;
    char piece[256];
    double t_report = kvant_time_ms();
    for (int g = 0; g < o.n_predict; g++) {
        const int32_t next = kvant_sampler_sample(smp, logits);
        if (g == 0) s.t_first = kvant_time_ms();
        if (kvant_token_is_eog(m, next) && !o.ignore_eos) break;
        kvant_sampler_accept(smp, next);
        const int len = kvant_token_to_piece(m, tokens[n - 1], next, piece, sizeof piece);
        fwrite(piece, 1, (size_t)len, stdout);
        fflush(stdout);
        tokens[n++] = next;
        s.n_gen++;
        if (o.report_every && s.n_gen % o.report_every == 0) {
            const double now = kvant_time_ms();
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            fprintf(stderr, "\n[report] %d tokens: %.1f tokens/s over the last %d, KV %zu bytes, peak RSS %.1f MiB\n",
                    s.n_gen, o.report_every * 1e3 / (now - t_report), o.report_every, kvant_seq_kv_bytes(seq),
                    ru.ru_maxrss / 1024.0);
            t_report = now;
        }
        if (g + 1 == o.n_predict) break;
        if (o.no_cache) { /* the naive decoder: recompute every position */
            kvant_seq_reset(seq);
            if (kvant_forward(seq, tokens, n, logits, false, &st)) goto fwd_fail;
        } else if (kvant_forward(seq, &tokens[n - 1], 1, logits, false, &st)) goto fwd_fail;
    }
    s.t_end = kvant_time_ms();
    if (!s.t_first) s.t_first = s.t_end;
    s.kv_bytes = kvant_seq_kv_bytes(seq);
    s.evicted = kvant_seq_evicted(seq);
    kvant_seq_kv_stats(seq, &s.kv);

    print_stats(&o, &s);
    rc = CLI_OK;
    goto done;
fwd_fail:
    fprintf(stderr, "\nkvant run: %s\n", st.msg);
done:
    kvant_sampler_free(smp);
    kvant_seq_free(seq);
    kvant_int8_free(q8);
    cli_int8_free(&o.i8);
    free(tokens);
    free(logits);
    free(chat_text);
    kvant_model_free(m);
    return rc;
}
