/* cmd_batch.c - `kvant bench-batch`: N sequences decoding together through
 * the serving engine (kvant_engine_*), as llama.cpp's llama-batched-bench
 * measures it: N prompts of -p random tokens prefilled together (PP), then
 * -n decode steps for all N at once (TG).  Optionally runs llama-batched-bench
 * on the same file with the same settings and prints its figures beside. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void batch_help(void) {
    printf("usage: kvant bench-batch -m MODEL [--seqs 1,4,16] [-p 32] [-n 128] [-t N] [--peer BIN]\n"
           "\n"
           "Runs N sequences through the serving engine at once, for each N of --seqs:\n"
           "N prompts of -p random tokens are submitted together and prefilled (PP),\n"
           "then all N decode -n tokens together, one batched forward pass per step (TG).\n"
           "Prints tokens/s of both phases as llama-batched-bench does (S_PP = N*p/T_PP,\n"
           "S_TG = N*n/T_TG).  One warm-up run precedes the timed ones.\n"
           "\n"
           "  -m, --model FILE        GGUF or llama2.c model\n"
           "      --seqs LIST         sequence counts, comma separated (default 1,4,16)\n"
           "  -p, --n-prompt N        prompt tokens per sequence (default 32)\n"
           "  -n, --n-gen N           decode steps per sequence (default 128)\n"
           "  -t, --threads N         threads (default: number of CPUs, %d here)\n"
           "  -b, --max-batch-tokens N  the engine's token budget per step (default 512)\n"
           "      --kv-type T         f16 (default, as llama.cpp), f32 or q8_0\n"
           "      --peer BIN          also run this llama-batched-bench binary with the same\n"
           "                          model, threads, -npp, -ntg, -npl (and -c 4096 -b 512\n"
           "                          -ub 512) and print its S_PP / S_TG beside kvant's\n"
           "      --target-ms MS      adaptive prompt chunks: keep each step under about MS ms\n"
           "                          (chunks aim at 0.9 x MS; default off)\n"
           "      --inject N          chunked-prefill test instead: the largest --seqs count of\n"
           "                          streams decode -n tokens; --inject-at ms (default 1000) after\n"
           "                          they started, an N-token prompt arrives.  Prints the streams'\n"
           "                          inter-token gaps (median, p99, max) with and without it, and\n"
           "                          its time to first token\n",
           kvant_default_threads());
}

typedef struct {
    double pp_s, tg_s; /* seconds */
    /* inter-token gaps of the N decoders (ms) and the injected prompt's TTFT */
    double gap_med, gap_p99, gap_max, inject_ttft_ms;
    int max_chunk;     /* the largest batch a step ran */
} batch_time;

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* one run of N sequences; false on error (printed) */
static bool run_batch(kvant_model *m, const kvant_engine_params *ep, int N, int np, int ng, uint64_t seed,
                      int inject, double inject_at_ms, batch_time *out) {
    kvant_status st;
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    kvant_engine *e = kvant_engine_new(m, ep, &st);
    if (!e) {
        fprintf(stderr, "kvant bench-batch: %s\n", st.msg);
        return false;
    }
    const int plen = np > inject ? np : inject;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)plen);
    kvant_event *ev = malloc(sizeof(kvant_event) * (size_t)(2 * N + 16));
    double *last = calloc((size_t)N + 2, sizeof(double));
    double *gaps = malloc(sizeof(double) * ((size_t)N * (ng + 1) + 1));
    int n_gaps = 0;
    memset(out, 0, sizeof *out);
    bool ok = prompt && ev && last && gaps;
    kvant_request r = {0};
    r.sampling = kvant_sampling_default();
    r.sampling.temperature = 0;
    r.max_tokens = ng + 1; /* the first token comes from the prompt pass */
    r.ignore_eos = true;
    const double t0 = kvant_time_ms();
    for (int i = 0; ok && i < N; i++) {
        for (int k = 0; k < np; k++) { /* distinct prompts: no prefix-cache hits */
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            prompt[k] = (int32_t)((seed >> 33) % (uint64_t)(in.vocab_size - 3)) + 3;
        }
        if (kvant_engine_submit(e, prompt, np, &r, &st) < 0) {
            fprintf(stderr, "kvant bench-batch: %s\n", st.msg);
            ok = false;
        }
    }
    int first = 0, done = 0;
    double t_pp = 0, t_inject = 0;
    int64_t inject_id = -1;
    while (ok && done < N + (inject_id > 0)) {
        if (inject > 0 && inject_id < 0 && first == N && kvant_time_ms() - t_pp >= inject_at_ms) {
            /* the long prompt arrives while the N sequences decode */
            for (int k = 0; k < inject; k++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                prompt[k] = (int32_t)((seed >> 33) % (uint64_t)(in.vocab_size - 3)) + 3;
            }
            kvant_request r1 = r;
            r1.max_tokens = 1;
            t_inject = kvant_time_ms();
            if ((inject_id = kvant_engine_submit(e, prompt, inject, &r1, &st)) < 0) {
                fprintf(stderr, "kvant bench-batch: %s\n", st.msg);
                ok = false;
                break;
            }
        }
        const int k = kvant_engine_step(e, ev, 2 * N + 16, &st);
        if (k < 0) {
            fprintf(stderr, "kvant bench-batch: %s\n", st.msg);
            ok = false;
            break;
        }
        kvant_engine_stats es;
        kvant_engine_get_stats(e, &es);
        if (es.last_batch_tokens > out->max_chunk) out->max_chunk = es.last_batch_tokens;
        const double now = kvant_time_ms();
        for (int i = 0; i < k; i++) {
            if (ev[i].id == inject_id) {
                if (ev[i].n_generated == 1) out->inject_ttft_ms = now - t_inject;
                if (ev[i].finish) done++;
                continue;
            }
            const int64_t id = ev[i].id; /* 1..N */
            if (ev[i].n_generated == 1 && ++first == N) t_pp = now;
            if (ev[i].n_generated > 1 && id >= 1 && id <= N) gaps[n_gaps++] = now - last[id];
            if (id >= 1 && id <= N) last[id] = now;
            if (ev[i].finish) done++;
        }
    }
    if (n_gaps > 0) {
        qsort(gaps, (size_t)n_gaps, sizeof *gaps, cmp_dbl);
        out->gap_med = gaps[n_gaps / 2];
        out->gap_p99 = gaps[(int)(0.99 * (n_gaps - 1))];
        out->gap_max = gaps[n_gaps - 1];
    }
    free(last);
    free(gaps);
    const double t_end = kvant_time_ms();
    out->pp_s = (t_pp - t0) / 1e3;
    out->tg_s = (t_end - t_pp) / 1e3;
    free(prompt);
    free(ev);
    kvant_engine_free(e);
    return ok;
}

/* S_PP and S_TG of llama-batched-bench's row for `npl` sequences; false if
 * the run failed or printed no such row */
static bool peer_row(FILE *f, int npl, double *spp, double *stg) {
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        int pp, tg, b, nkv;
        double tpp, ttg, t, s;
        if (sscanf(line, " | %d | %d | %d | %d | %lf | %lf | %lf | %lf | %lf | %lf", &pp, &tg, &b, &nkv, &tpp, spp,
                   &ttg, stg, &t, &s) == 10 &&
            b == npl) {
            return true;
        }
    }
    return false;
}

int cmd_bench_batch(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant bench-batch", false};
    const char *path = NULL, *seqs = "1,4,16", *peer = NULL;
    kvant_kv_type kv_type = KVANT_KV_F16;
    int np = 32, ng = 128, threads = 0, mbt = 512, inject = 0;
    double target_ms = 0, inject_at = 1000;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { batch_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "--seqs", NULL)) seqs = cli_str(&a);
        else if (cli_is(&a, "-p", "--n-prompt")) np = cli_int(&a, 1, 1 << 16);
        else if (cli_is(&a, "-n", "--n-gen")) ng = cli_int(&a, 1, 1 << 16);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "-b", "--max-batch-tokens")) mbt = cli_int(&a, 1, 65536);
        else if (cli_is(&a, "--kv-type", NULL)) kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_is(&a, "--peer", NULL)) peer = cli_str(&a);
        else if (cli_is(&a, "--target-ms", NULL)) target_ms = cli_float(&a, 0, 1e6f);
        else if (cli_is(&a, "--inject", NULL)) inject = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--inject-at", NULL)) inject_at = cli_float(&a, 0, 1e7f);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path) {
        fprintf(stderr, "kvant bench-batch: -m MODEL is required (see --help)\n");
        return CLI_USAGE;
    }
    int ns[64], n_ns = 0, max_n = 0;
    for (const char *p = seqs; *p && n_ns < 64;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || (*end && *end != ',')) {
            fprintf(stderr, "kvant bench-batch: bad --seqs '%s' (e.g. 1,4,16)\n", seqs);
            return CLI_USAGE;
        }
        ns[n_ns++] = (int)v;
        if (v > max_n) max_n = (int)v;
        p = *end ? end + 1 : end;
    }
    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = NULL, .n_threads = threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) {
        fprintf(stderr, "kvant bench-batch: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    const int nth = threads > 0 ? threads : kvant_default_threads();
    kvant_engine_params ep = kvant_engine_default();
    ep.max_batch_tokens = mbt;
    ep.kv_type = kv_type;
    ep.prefix_cache = false;
    ep.max_ctx = (np > inject ? np : inject) + ng + 1;
    ep.target_step_ms = target_ms;
    int rc = CLI_OK;
    batch_time warm;
    if (inject > 0) { /* the chunked-prefill test: gaps with and without the long prompt */
        ep.max_seqs = max_n + 1;
        printf("model: %s, %d threads, kv %s, max_batch_tokens %d, target step %.0f ms\n\n", path, nth, cli_choice_name(cli_kv_types, kv_type), mbt,
               target_ms);
        printf("| streams | injected prompt | ITL median ms | ITL p99 ms | ITL max ms | largest step tokens | injected TTFT ms |\n");
        printf("|---------|-----------------|---------------|------------|------------|---------------------|------------------|\n");
        for (int with = 0; with < 2 && rc == CLI_OK; with++) {
            batch_time t;
            fprintf(stderr, "kvant bench-batch: %d streams%s...\n", max_n, with ? " + long prompt" : "");
            if (!run_batch(m, &ep, max_n, np, ng, 777, with ? inject : 0, inject_at, &t)) {
                rc = CLI_FAIL;
                break;
            }
            printf("| %7d | %15d | %13.1f | %10.1f | %10.1f | %19d |", max_n, with ? inject : 0, t.gap_med, t.gap_p99,
                   t.gap_max, t.max_chunk);
            if (with) printf(" %16.0f |\n", t.inject_ttft_ms);
            else printf(" %16s |\n", "-");
        }
        kvant_model_free(m);
        return rc;
    }
    ep.max_seqs = 4;
    if (!run_batch(m, &ep, 4, np < 8 ? np : 8, 8, 1, 0, 0, &warm)) rc = CLI_FAIL;
    printf("model: %s, %d threads, kv %s, max_batch_tokens %d, %s kernels\n\n", path, nth, cli_choice_name(cli_kv_types, kv_type), mbt,
           kvant_kernel_tier());
    printf("|    PP |     TG |    B |  kvant S_PP t/s |  kvant S_TG t/s |%s\n", peer ? " llama.cpp S_PP t/s | llama.cpp S_TG t/s | TG ratio |" : "");
    printf("|-------|--------|------|-----------------|-----------------|%s\n", peer ? "--------------------|--------------------|----------|" : "");
    for (int i = 0; rc == CLI_OK && i < n_ns; i++) {
        const int N = ns[i];
        ep.max_seqs = N;
        batch_time t;
        fprintf(stderr, "kvant bench-batch: %d sequences...\n", N);
        if (!run_batch(m, &ep, N, np, ng, 12345 + (uint64_t)i, 0, 0, &t)) {
            rc = CLI_FAIL;
            break;
        }
        const double spp = N * (double)np / t.pp_s, stg = N * (double)ng / t.tg_s;
        printf("| %5d | %6d | %4d | %15.2f | %15.2f |", np, ng, N, spp, stg);
        if (peer) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd, "'%s' -m '%s' -c 4096 -b 512 -ub 512 -npp %d -ntg %d -npl %d -t %d 2>/dev/null",
                     peer, path, np, ng, N, nth);
            fprintf(stderr, "kvant bench-batch: %s\n", cmd);
            FILE *f = popen(cmd, "r");
            double ppp = 0, ptg = 0;
            const bool got = f && peer_row(f, N, &ppp, &ptg);
            if (f) pclose(f);
            if (got) printf(" %18.2f | %18.2f | %8.2f |", ppp, ptg, stg / ptg);
            else printf(" %18s | %18s | %8s |", "failed", "failed", "-");
        }
        printf("\n");
        fflush(stdout);
    }
    kvant_model_free(m);
    return rc;
}
