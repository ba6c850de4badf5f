/* cmd_bench.c - `kvant bench`: prefill (pp) and decode (tg) tokens/s,
 * mean +- sd over repetitions, in llama-bench's table format, through the
 * same public API (kvant_forward on a sequence) that `run` uses.
 * pp N: one batch of N random tokens into an empty cache (logits of the
 * last token only, as llama-bench).  tg N: N single-token decode steps
 * into an empty cache.  One warm-up run of each precedes the timed ones.
 * -d D (llama-bench's --n-depth): each test starts with D random tokens
 * already in the cache.  They are computed once per depth (untimed); after
 * each run the cache is cut back to them (kvant_seq_truncate; a paged
 * cache keeps whole blocks, so the few tokens of a partial block are
 * computed again, untimed), as llama-bench restores its saved state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "cli/int8_flags.h"

static void bench_help(void) {
    printf("usage: kvant bench -m MODEL [--vs MODEL2] [-p 512] [-n 128] [-d 0[,D...]] [-t N] [-r 5] [--json]\n"
           "\n"
           "Measures prompt processing (pp: one batch of -p random tokens) and text\n"
           "generation (tg: -n single-token decode steps) in tokens/s, mean +- sd over -r\n"
           "repetitions after one warm-up, printed as llama-bench's markdown table.\n"
           "\n"
           "  -m, --model FILE     GGUF or llama2.c model (-z TOKENIZER for llama2.c)\n"
           "      --vs FILE2       a second model measured in the same runs: tg steps the two\n"
           "                       models token by token in turn (pp: run after run, the order\n"
           "                       swapped each repetition), so both see the same minutes of\n"
           "                       a machine whose memory bandwidth drifts; adds a row with\n"
           "                       the median (min-max) over the runs of -m's t/s / FILE2's.\n"
           "                       Each model evicts the other from the caches: meant for\n"
           "                       models larger than the last-level cache\n"
           "  -p, --n-prompt N     prompt tokens (default 512; 0 skips pp)\n"
           "  -n, --n-gen N        generated tokens (default 128; 0 skips tg)\n"
           "  -d, --n-depth D,...  tokens already in the cache when each test starts\n"
           "                       (default 0; several values: one row per depth and test)\n"
           "  -t, --threads N      threads (default: number of CPUs, %d here)\n"
           "  -r, --repetitions N  timed runs per test (default 5)\n"
           "      --attn A         flash (default) or naive\n"
           "      --kv K           paged (default) or contiguous\n"
           "      --kv-type T      f16 (default), f32 or q8_0\n"
           "      --kv-mem MiB     paged: block pool budget (default: sized for -p/-n)\n"
           "      --w8a8, --int8-mixed, --smoothquant ...  INT8 linear layers (kvant ppl --help)\n"
           "      --block-size N   paged: tokens per block (default 16)\n"
           "      --json           one JSON object per test instead of the table\n"
           "The last line gives the peak resident memory of the process.\n",
           kvant_default_threads());
}

typedef struct {
    double mean, sd;
    double *samples;
} stat;

static stat stats_of(double *ts, int n) {
    stat s = {0, 0, ts};
    for (int i = 0; i < n; i++) s.mean += ts[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (ts[i] - s.mean) * (ts[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* tokens/s of one pp (gen false: one batch) or tg (gen: one token per
 * forward) run from an empty cache, as kvant bench times it (and kvant cliff's
 * speed columns); -1 on error, the message printed after "CMD: " */
double cli_bench_run(kvant_seq *seq, const int32_t *toks, int n, bool gen, float *logits, const char *cmd) {
    kvant_seq_reset(seq);
    return cli_bench_time(seq, toks, n, gen, logits, cmd);
}

double cli_median(double *v, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: n is a handful of runs */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { const double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cli_bench_time(kvant_seq *seq, const int32_t *toks, int n, bool gen, float *logits, const char *cmd) {
    kvant_status st;
    const double t0 = kvant_time_ms();
    if (!gen) {
        if (kvant_forward(seq, toks, n, logits, false, &st)) goto fail;
    } else {
        for (int i = 0; i < n; i++)
            if (kvant_forward(seq, &toks[i], 1, logits, false, &st)) goto fail;
    }
    return n * 1e3 / (kvant_time_ms() - t0);
fail:
    fprintf(stderr, "%s: %s\n", cmd, st.msg);
    return -1;
}

/* Makes the cache hold exactly dtoks[0..depth), computing what is missing
 * (untimed).  *valid: how many leading cached positions are dtoks' (what
 * follows them is a test's tokens): the cache is cut back to the shorter
 * of that and depth first.  CLI_OK or CLI_FAIL. */
static int depth_ready(kvant_seq *seq, const int32_t *dtoks, int depth, int *valid, float *logits) {
    const int keep = *valid < depth ? *valid : depth;
    int have = kvant_seq_pos(seq);
    if (have > keep && (have = kvant_seq_truncate(seq, keep)) < 0) {
        kvant_seq_reset(seq);
        have = 0;
    }
    *valid = have;
    const double t0 = kvant_time_ms();
    if (depth - have > 64) fprintf(stderr, "kvant bench: computing %d tokens of depth %d...\n", depth - have, depth);
    kvant_status st;
    for (int i = have; i < depth; i += 512) { /* batches as a server's chunked prefill */
        const int n = depth - i < 512 ? depth - i : 512;
        if (kvant_forward(seq, dtoks + i, n, logits, false, &st)) {
            fprintf(stderr, "kvant bench: depth %d: %s\n", depth, st.msg);
            return CLI_FAIL;
        }
    }
    if (depth - have > 64) fprintf(stderr, "kvant bench: depth %d ready in %.1f s\n", depth, (kvant_time_ms() - t0) / 1e3);
    *valid = depth;
    return CLI_OK;
}

/* "0,2048,8192" into depths[] (at most max); the count, or -1 (message printed) */
static int parse_depths(const char *s, int *depths, int max) {
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > (1 << 24) || n == max || (*end && *end != ',')) {
            fprintf(stderr, "kvant bench: -d wants depths like 0,2048,8192 (0 .. 16777216, at most %d), not '%s'\n",
                    max, s);
            return -1;
        }
        depths[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* One model of the run: -m, and with --vs a second one stepped in turn */
typedef struct {
    const char *path;
    kvant_model *m;
    kvant_seq *seq;
    kvant_model_info in;
    char desc[160]; /* the name and dominant tensor type, as llama-bench names a model */
    int valid;      /* leading cached positions that are the depth's tokens */
    size_t kv_tok;  /* KV cache bytes per cached token (all layers, K and V) */
    double *ts;     /* tokens/s of each timed run */
} bench_side;

static int side_open(bench_side *s, const char *tokenizer, int threads, const kvant_seq_params *sp, int reps) {
    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = tokenizer, .n_threads = threads};
    if (!(s->m = kvant_model_open(s->path, &mp, &st))) {
        fprintf(stderr, "kvant bench: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    kvant_model_get_info(s->m, &s->in);
    if (!(s->seq = kvant_seq_new_ex(s->m, sp, &st)) || !(s->ts = malloc(sizeof(double) * (size_t)reps))) {
        fprintf(stderr, "kvant bench: %s\n", s->seq ? "out of memory" : st.msg);
        return CLI_FAIL;
    }
    const char *main_type = "?";
    size_t best = 0;
    for (int i = 0; i < kvant_model_n_tensors(s->m); i++) {
        kvant_tensor_info ti, tj;
        kvant_model_tensor(s->m, i, &ti);
        size_t sum = 0;
        for (int j = 0; j < kvant_model_n_tensors(s->m); j++) {
            kvant_model_tensor(s->m, j, &tj);
            if (!strcmp(ti.type_name, tj.type_name)) sum += tj.nbytes;
        }
        if (sum > best) { best = sum; main_type = ti.type_name; }
    }
    snprintf(s->desc, sizeof s->desc, "%s %s", s->in.name, main_type);
    return CLI_OK;
}

static void side_close(bench_side *s) {
    free(s->ts);
    kvant_seq_free(s->seq);
    kvant_model_free(s->m);
}

/* One timed run of each side (ns of them) from the depth's cache: pp (and
 * a lone side) one run after the other (cli_bench_time); two sides' tg
 * token by token, side after side, each token timed on its own, so both
 * see the same minutes of a machine whose memory bandwidth drifts.  first:
 * the side that goes first.  After its step a side's threads rest
 * (kvant_model_rest_threads) so they do not spin on the other's CPUs.
 * ts[s] = its tokens/s; -1 on error (printed). */
static int bench_turns(bench_side *sd, int ns, int first, const int32_t *toks, int n, bool gen, float *logits,
                       double *ts) {
    const bool turns = gen && ns > 1;
    double ms[2] = {0, 0};
    for (int k = 0; k < (turns ? n : 1); k++)
        for (int o = 0; o < ns; o++) {
            const int s = (first + o) % ns;
            if (!turns) {
                if ((ts[s] = cli_bench_time(sd[s].seq, toks, n, gen, logits, "kvant bench")) < 0) return -1;
            } else {
                kvant_status st;
                const double t0 = kvant_time_ms();
                if (kvant_forward(sd[s].seq, &toks[k], 1, logits, false, &st)) {
                    fprintf(stderr, "kvant bench: %s\n", st.msg);
                    return -1;
                }
                ms[s] += kvant_time_ms() - t0;
            }
            if (ns > 1) kvant_model_rest_threads(sd[s].m);
        }
    if (turns)
        for (int s = 0; s < ns; s++) ts[s] = n * 1e3 / ms[s];
    return 0;
}

int cmd_bench(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant bench", false};
    const char *tokenizer = NULL;
    int n_prompt = 512, n_gen = 128, threads = 0, reps = 5, depths[16] = {0}, n_depths = 1;
    bool json = false;
    bench_side sd[2] = {{0}, {0}};
    kvant_seq_params sp = kvant_seq_default();
    cli_int8 i8;
    cli_int8_init(&i8);
    kvant_int8 *q8 = NULL;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { bench_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) sd[0].path = cli_str(&a);
        else if (cli_is(&a, "--vs", NULL)) sd[1].path = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) tokenizer = cli_str(&a);
        else if (cli_is(&a, "-p", "--n-prompt")) n_prompt = cli_int(&a, 0, 1 << 20);
        else if (cli_is(&a, "-n", "--n-gen")) n_gen = cli_int(&a, 0, 1 << 20);
        else if (cli_is(&a, "-d", "--n-depth")) {
            const char *v = cli_str(&a);
            if (v && (n_depths = parse_depths(v, depths, 16)) < 0) return CLI_USAGE;
        }
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "-r", "--repetitions")) reps = cli_int(&a, 1, 1000);
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--attn", NULL)) sp.attn = (kvant_attn)cli_choice_arg(&a, cli_attns);
        else if (cli_is(&a, "--kv", NULL)) sp.kv = (kvant_cache)cli_choice_arg(&a, cli_caches);
        else if (cli_is(&a, "--kv-type", NULL)) sp.kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_is(&a, "--kv-mem", NULL)) sp.kv_mem_mib = cli_float(&a, 0.001f, 1e7f);
        else if (cli_is(&a, "--block-size", NULL)) sp.block_size = cli_int(&a, 1, 4096);
        else if (cli_int8_flag(&a, &i8)) {}
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!sd[0].path) {
        fprintf(stderr, "kvant bench: no model given: -m MODEL (see --help)\n");
        return CLI_USAGE;
    }
    const int ns = sd[1].path ? 2 : 1;
    if (ns == 2 && i8.any) {
        fprintf(stderr, "kvant bench: --vs compares two model files as they are; the INT8 options apply to one "
                        "model (run them without --vs)\n");
        return CLI_USAGE;
    }
    if (!threads) threads = kvant_default_threads();
    int max_depth = 0;
    for (int i = 0; i < n_depths; i++) max_depth = depths[i] > max_depth ? depths[i] : max_depth;
    const int n_test = n_prompt > n_gen ? n_prompt : n_gen, n_ctx = max_depth + n_test + 1;
    sp.n_ctx = n_ctx;
    int32_t *toks = NULL;
    float *logits = NULL;
    double *ratio = NULL;
    int rc = CLI_FAIL;
    int vocab = 0, vmax = 0; /* random tokens below both vocabularies; logits for the larger */
    for (int s = 0; s < ns; s++) {
        if ((rc = side_open(&sd[s], tokenizer, threads, &sp, reps)) != CLI_OK) goto done;
        vocab = !s || sd[s].in.vocab_size < vocab ? sd[s].in.vocab_size : vocab;
        vmax = sd[s].in.vocab_size > vmax ? sd[s].in.vocab_size : vmax;
    }
    rc = CLI_FAIL;
    toks = malloc(sizeof(int32_t) * (size_t)n_ctx);
    logits = malloc(sizeof(float) * (size_t)vmax);
    ratio = malloc(sizeof(double) * (size_t)reps);
    if (!toks || !logits || !ratio) {
        fprintf(stderr, "kvant bench: out of memory\n");
        goto done;
    }
    if ((rc = cli_int8_build(&i8, sd[0].m, "kvant bench", &q8)) != CLI_OK) goto done;
    rc = CLI_FAIL;
    cli_int8_describe(&i8, q8, "kvant bench");
    kvant_status st;
    if (q8 && kvant_seq_use_int8(sd[0].seq, q8, &st)) {
        fprintf(stderr, "kvant bench: %s\n", st.msg);
        goto done;
    }
    if (q8) {
        const bool mixed = i8.p.mode == KVANT_INT8_MIXED;
        const size_t l = strlen(sd[0].desc);
        snprintf(sd[0].desc + l, sizeof sd[0].desc - l, " %s",
                 i8.smooth ? "SmoothQuant-W8A8" : mixed ? "LLM.int8" : "W8A8");
    }
    uint64_t r = 12345;
    for (int i = 0; i < n_ctx; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int32_t)((r >> 33) % (uint64_t)vocab);
    }
    const int32_t *dtoks = toks + n_test + 1; /* the depth's tokens; the tests' are toks[0..n_test) */

    if (!json) {
        printf("| model | size | params | backend | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    }
    for (int di = 0; di < n_depths; di++)
    for (int test = 0; test < 2; test++) {
        const bool gen = test == 1;
        const int n = gen ? n_gen : n_prompt, depth = depths[di];
        if (n == 0) continue;
        for (int i = -1; i < reps; i++) { /* -1: the warm-up */
            double t[2];
            for (int s = 0; s < ns; s++)
                if (depth_ready(sd[s].seq, dtoks, depth, &sd[s].valid, logits)) goto done;
            if (bench_turns(sd, ns, i & 1, toks, n, gen, logits, t)) goto done;
            for (int s = 0; s < ns; s++) {
                if (i >= 0) sd[s].ts[i] = t[s];
                sd[s].kv_tok = kvant_seq_kv_bytes(sd[s].seq) / (size_t)kvant_seq_pos(sd[s].seq);
            }
            if (i >= 0 && ns == 2) ratio[i] = t[0] / t[1];
        }
        char name[48];
        snprintf(name, sizeof name, depth ? "%s%d @ d%d" : "%s%d", gen ? "tg" : "pp", n, depth);
        for (int s = 0; s < ns; s++) {
            const stat x = stats_of(sd[s].ts, reps);
            if (json) {
                printf("{\"model\": \"%s\", \"size\": %zu, \"params\": %lld, \"backend\": \"CPU %s\", \"threads\": %d, "
                       "\"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"kv_bytes_per_token\": %zu, "
                       "\"avg_ts\": %.4f, \"stddev_ts\": %.4f, \"samples_ts\": [",
                       sd[s].desc, sd[s].in.weight_bytes, (long long)sd[s].in.n_params, kvant_kernel_tier(), threads,
                       name, gen ? 0 : n, gen ? n : 0, depth, sd[s].kv_tok, x.mean, x.sd);
                for (int i = 0; i < reps; i++) printf("%s%.4f", i ? ", " : "", sd[s].ts[i]);
                printf("]}\n");
            } else {
                printf("| %s | %.2f MiB | %.2f M | CPU %s | %d | %s | %.2f ± %.2f |\n", sd[s].desc,
                       sd[s].in.weight_bytes / 1048576.0, sd[s].in.n_params / 1e6, kvant_kernel_tier(), threads, name,
                       x.mean, x.sd);
            }
        }
        if (ns == 2) { /* -m's t/s over --vs's, run by run: the median and range */
            double sorted[1000]; /* reps <= 1000 */
            memcpy(sorted, ratio, sizeof(double) * (size_t)reps);
            const double med = cli_median(sorted, reps);
            if (json) {
                printf("{\"ratio\": \"%s / %s\", \"test\": \"%s\", \"n_depth\": %d, \"median\": %.4f, \"min\": %.4f, "
                       "\"max\": %.4f, \"samples\": [",
                       sd[0].desc, sd[1].desc, name, depth, med, sorted[0], sorted[reps - 1]);
                for (int i = 0; i < reps; i++) printf("%s%.4f", i ? ", " : "", ratio[i]);
                printf("]}\n");
            } else {
                printf("| ratio -m / --vs | | | CPU %s | %d | %s | %.3f (%.3f-%.3f) |\n", kvant_kernel_tier(), threads,
                       name, med, sorted[0], sorted[reps - 1]);
            }
        }
        fflush(stdout);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (!json) printf("\npeak RSS %.1f MiB (attention %s, KV %s %s, %zu bytes per cached token)\n",
                      ru.ru_maxrss / 1024.0, cli_choice_name(cli_attns, sp.attn), cli_choice_name(cli_caches, sp.kv),
                      cli_choice_name(cli_kv_types, sp.kv_type), sd[0].kv_tok);
    if (!json) printf("%s\n", kvant_cpu_report());
    rc = CLI_OK;
done:
    free(ratio);
    free(logits);
    free(toks);
    for (int s = 0; s < ns; s++) side_close(&sd[s]);
    kvant_int8_free(q8);
    cli_int8_free(&i8);
    return rc;
}
