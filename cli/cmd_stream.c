/* cmd_stream.c - StreamingLLM tools:
 *   kvant stream-ppl    per-token loss over a long stream under a cache policy
 *   kvant attn-stats    attention mass on the first tokens, per layer */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void stream_help(void) {
    printf("usage: kvant stream-ppl -m MODEL -f TEXT --policy P [--sink N] [--window W] [--max-tokens N]\n"
           "                        [--repeat K] [--dump FILE]\n"
           "\n"
           "Feeds the text one token at a time and scores every next token under a KV\n"
           "cache policy, printing perplexity and tokens/s:\n"
           "  full        keep every token (positions grow past the training context)\n"
           "  streaming   StreamingLLM: the first --sink tokens + the last --window tokens\n"
           "              (--sink 0: window only)\n"
           "  recompute   recompute the last --window tokens from scratch for every token\n"
           "\n"
           "  --repeat K      concatenate the text K times (long streams from a short file)\n"
           "  --max-tokens N  score at most N tokens\n"
           "  --dump FILE     write the per-token loss (nats), one per line\n"
           "  -t N            threads\n");
}

static void progress(void *user, int done, int total, double ppl) {
    (void)user;
    fprintf(stderr, "\r%d/%d tokens, PPL so far %.4f   ", done, total, ppl);
    if (done == total) fprintf(stderr, "\n");
}

int cmd_stream_ppl(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant stream-ppl", false};
    const char *path = NULL, *file = NULL, *dump = NULL;
    kvant_stream_params p = {.policy = KVANT_STREAM_FULL};
    bool policy_set = false;
    int threads = 0, repeat = 1;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { stream_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-f", "--file")) file = cli_str(&a);
        else if (cli_is(&a, "--policy", NULL)) p.policy = (kvant_stream_policy)cli_choice_arg(&a, cli_stream_policies), policy_set = true;
        else if (cli_is(&a, "--sink", NULL)) p.sink = cli_int(&a, 0, 1 << 20);
        else if (cli_is(&a, "--window", NULL)) p.window = cli_int(&a, 1, 1 << 22);
        else if (cli_is(&a, "--max-tokens", NULL)) p.max_tokens = cli_int(&a, 1, 1 << 30);
        else if (cli_is(&a, "--repeat", NULL)) repeat = cli_int(&a, 1, 1000);
        else if (cli_is(&a, "--dump", NULL)) dump = cli_str(&a);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path || !file || !policy_set) {
        fprintf(stderr, "kvant stream-ppl: -m, -f and --policy are required (see --help)\n");
        return CLI_USAGE;
    }
    size_t n1;
    char *one = cli_read_file(file, &n1);
    if (!one) {
        fprintf(stderr, "kvant stream-ppl: cannot read %s\n", file);
        return CLI_USAGE;
    }
    char *text = malloc(n1 * (size_t)repeat + 1);
    for (int i = 0; i < repeat; i++) memcpy(text + n1 * (size_t)i, one, n1);
    free(one);
    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = NULL, .n_threads = threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    int rc = CLI_FAIL;
    if (!m) {
        fprintf(stderr, "kvant stream-ppl: %s\n", st.msg);
        free(text);
        return cli_status_exit(&st);
    }
    const int cap = p.max_tokens > 0 ? p.max_tokens : (int)(n1 * (size_t)repeat);
    float *nll = dump ? malloc(sizeof(float) * (size_t)cap) : NULL;
    p.nll_out = nll;
    p.progress = progress;
    kvant_stream_result r;
    if (kvant_stream_ppl(m, text, n1 * (size_t)repeat, &p, &r, &st)) {
        fprintf(stderr, "kvant stream-ppl: %s\n", st.msg);
        rc = st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
    } else {
        printf("policy %s (sink %d, window %d): PPL %.4f over %lld tokens, %.1f tokens/s, KV %zu bytes at the end\n",
               cli_choice_name(cli_stream_policies, p.policy), p.sink, p.window, r.ppl, (long long)r.n_scored, r.tokens_per_s, r.kv_bytes);
        if (dump) {
            FILE *f = fopen(dump, "w");
            if (f) {
                for (int64_t i = 0; i < r.n_scored; i++) fprintf(f, "%.5f\n", nll[i]);
                fclose(f);
            }
        }
        rc = CLI_OK;
    }
    free(nll);
    free(text);
    kvant_model_free(m);
    return rc;
}

static void stats_help(void) {
    printf("usage: kvant attn-stats -m MODEL -f TEXT [-c 512] [--chunks N] [--first K]\n"
           "\n"
           "Runs the naive attention over chunks of the text and prints, per layer, the\n"
           "average attention probability that a (query, head) pair puts on the first K\n"
           "positions (default 4): the attention-sink effect StreamingLLM relies on, next\n"
           "to what attention spread evenly over each query's causal window would give.\n");
}

int cmd_attn_stats(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant attn-stats", false};
    const char *path = NULL, *file = NULL;
    int c = 512, chunks = 10, first = 4, threads = 0;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { stats_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-f", "--file")) file = cli_str(&a);
        else if (cli_is(&a, "-c", "--ctx")) c = cli_int(&a, 8, 1 << 20);
        else if (cli_is(&a, "--chunks", NULL)) chunks = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--first", NULL)) first = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path || !file) {
        fprintf(stderr, "kvant attn-stats: -m and -f are required (see --help)\n");
        return CLI_USAGE;
    }
    size_t n;
    char *text = cli_read_file(file, &n);
    if (!text) {
        fprintf(stderr, "kvant attn-stats: cannot read %s\n", file);
        return CLI_USAGE;
    }
    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = NULL, .n_threads = threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) {
        fprintf(stderr, "kvant attn-stats: %s\n", st.msg);
        free(text);
        return cli_status_exit(&st);
    }
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    int nt;
    int32_t *toks = kvant_tokenize_all(m, text, n, true, &nt, &st);
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = c;
    sp.attn = KVANT_ATTN_NAIVE;
    sp.sink_stats = first;
    kvant_seq *s = kvant_seq_new_ex(m, &sp, &st);
    int rc = CLI_FAIL, done = 0;
    for (int i = 0; s && i < chunks && (i + 1) * c <= nt; i++, done++) {
        kvant_seq_reset(s);
        toks[i * c] = in.bos_id; /* as the perplexity chunks: BOS first */
        if (kvant_forward(s, toks + (size_t)i * c, c, NULL, false, &st)) break;
    }
    if (s && done > 0) {
        double per[1024];
        const int L = kvant_seq_sink_stats(s, per, 1024);
        printf("attention mass on the first %d positions (average over %d chunks of %d tokens, all heads)\n", first,
               done, c);
        /* a query at position t spreading evenly over its t+1 positions puts
         * min(K, t+1) / (t+1) on the first K; averaged over t = 0 .. c-1 */
        double uniform = 0;
        for (int t = 0; t < c; t++) uniform += (double)(first < t + 1 ? first : t + 1) / (t + 1);
        printf("uniform attention over the causal window would give %.4f\n", uniform / c);
        for (int l = 0; l < L; l++) printf("layer %2d: %.4f\n", l, per[l]);
        rc = CLI_OK;
    } else {
        fprintf(stderr, "kvant attn-stats: %s\n", s ? (done ? st.msg : "text shorter than one chunk") : st.msg);
    }
    kvant_seq_free(s);
    kvant_model_free(m);
    free(toks);
    free(text);
    return rc;
}
