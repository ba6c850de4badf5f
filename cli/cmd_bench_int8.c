/* cmd_bench_int8.c - `kvant bench-int8`: the INT8 GEMM (W8A8, LLM.int8)
 * against kvant's F32 matmul at real layer shapes, in one run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void help(void) {
    printf("usage: kvant bench-int8 [--shape NxK[,NxK...]] [-T 512] [-r 3] [-t THREADS] [--outliers 8] [--json]\n"
           "\n"
           "Times y = x W^T with random weights (N output rows, K inputs) and T\n"
           "activation rows: kvant's matmul with F32 weights and with F16 weights, W8A8 (per-token INT8\n"
           "activations x per-channel INT8 weights, INT8 GEMM; with and without the\n"
           "activation quantization) and LLM.int8 (the same plus --outliers input\n"
           "columns in F32), best of -r calls each, and prints the speed ratio to F32.\n"
           "Default shapes: tinyllama-1.1b's FFN, 5632x2048 (gate/up) and 2048x5632 (down).\n"
           "\n"
           "  --shape NxK,...   layer shapes (N rows of K inputs)\n"
           "  -T N              activation rows (default 512: a prefill)\n"
           "  -r N              repetitions, the best counts (default 3)\n"
           "  -t N              threads (default: all CPUs)\n"
           "  --outliers N      outlier columns for LLM.int8 (default 8)\n"
           "  --json            one JSON object per shape\n");
}

int cmd_bench_int8(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant bench-int8", false};
    const char *shapes = "5632x2048,2048x5632";
    kvant_int8_bench_params p = {.T = 512, .reps = 3, .n_outliers = 8, .threshold = 6.0f};
    bool json = false;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { help(); return CLI_OK; }
        else if (cli_is(&a, "--shape", NULL)) shapes = cli_str(&a);
        else if (cli_is(&a, "-T", NULL)) p.T = cli_int(&a, 1, 65536);
        else if (cli_is(&a, "-r", "--reps")) p.reps = cli_int(&a, 1, 1000);
        else if (cli_is(&a, "-t", "--threads")) p.n_threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "--outliers", NULL)) p.n_outliers = cli_int(&a, 0, 1 << 17);
        else if (cli_is(&a, "--json", NULL)) json = true;
        else cli_unknown(&a);
    }
    if (a.error || !shapes) return CLI_USAGE;
    if (!json)
        printf("%-11s %5s %9s %9s %9s %9s %9s %8s %8s %8s %10s %10s %10s\n", "shape NxK", "T", "F32 ms", "F16 ms",
               "W8A8 ms", "GEMM ms", "int8mx ms", "W8A8/F32", "mx/F32", "W8A8/F16", "err W8A8", "err outl.",
               "err int8mx");
    for (const char *s = shapes; *s;) {
        char *end;
        long n = strtol(s, &end, 10), k = 0;
        if (*end == 'x') k = strtol(end + 1, &end, 10);
        if (n <= 0 || k <= 0 || (*end && *end != ',')) {
            fprintf(stderr, "kvant bench-int8: bad --shape '%s' (NxK,NxK...)\n", shapes);
            return CLI_USAGE;
        }
        s = *end ? end + 1 : end;
        p.N = (int)n;
        p.K = (int)k;
        kvant_int8_bench_result r;
        kvant_status st;
        fprintf(stderr, "kvant bench-int8: %ldx%ld, T=%d ...\n", n, k, p.T);
        if (kvant_int8_bench(&p, &r, &st)) {
            fprintf(stderr, "kvant bench-int8: %s\n", st.msg);
            return st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
        }
        const double gmac = (double)p.T * n * k / 1e9;
        if (json)
            printf("{\"N\": %ld, \"K\": %ld, \"T\": %d, \"tier\": \"%s\", \"f32_ms\": %.3f, \"f16_ms\": %.3f, \"w8a8_ms\": %.3f, "
                   "\"gemm_ms\": %.3f, \"mixed_ms\": %.3f, \"w8a8_speedup\": %.3f, \"mixed_speedup\": %.3f, "
                   "\"f32_gmacs\": %.2f, \"w8a8_gmacs\": %.2f, \"w8a8_err\": %.5f, \"w8a8_err_outliers\": %.5f, "
                   "\"mixed_err_outliers\": %.5f, \"outliers\": %d}\n",
                   n, k, p.T, r.tier, r.f32_ms, r.f16_ms, r.w8a8_ms, r.gemm_ms, r.mixed_ms, r.f32_ms / r.w8a8_ms,
                   r.f32_ms / r.mixed_ms, gmac / (r.f32_ms / 1e3), gmac / (r.w8a8_ms / 1e3), r.w8a8_err,
                   r.w8a8_err_outl, r.mixed_err, p.n_outliers);
        else
            printf("%5ldx%-5ld %5d %9.2f %9.2f %9.2f %9.2f %9.2f %7.2fx %7.2fx %7.2fx %10.5f %10.5f %10.5f\n", n, k,
                   p.T, r.f32_ms, r.f16_ms, r.w8a8_ms, r.gemm_ms, r.mixed_ms, r.f32_ms / r.w8a8_ms,
                   r.f32_ms / r.mixed_ms, r.f16_ms / r.w8a8_ms, r.w8a8_err, r.w8a8_err_outl, r.mixed_err);
        fflush(stdout);
        if (!json && !*s)
            printf("INT8 tile: %s; speed-up = F32 (or F16) ms / INT8 ms (same data, threads and run); "
                   "err = relative RMS vs F32 (outl.: input with %d outlier columns)\n",
                   r.tier, p.n_outliers);
    }
    return CLI_OK;
}
