/* cmd_cliff.c - `kvant cliff`: the precision cliff.  Quantizes MODEL with
 * every PTQ scheme x granularity x bit width (and llama.cpp's types), then
 * measures perplexity and KL divergence from MODEL for each; prints a table
 * (or JSON) and plots perplexity against bits per weight with gnuplot.
 * With --speed-model, each row's quantizer settings are also applied to a
 * second (typically synthetic, real-shape) model whose prefill and decode
 * tokens/s are measured as `kvant bench` does (kvant_forward on one
 * sequence: pp = one batch of N random tokens, tg = N single-token steps,
 * one warm-up, then R timed runs); the plot gains a speed panel. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

typedef struct {
    char name[48];          /* "zp4-g32", "Q4_0" */
    char family[32];        /* plot series: "zp g32", "llama.cpp" */
    const char *scheme, *gran;
    int bits;               /* 0 for llama.cpp types */
    double bpw, ppl, ppl_err, kl_mean, kl_p99, same_top, file_mib;
    bool ok;
    /* --speed-model: the same quantizer on the speed model */
    double s_bpw, s_mib, pp_ts, pp_sd, tg_ts, tg_sd; /* tokens/s: median (sd) of the timed runs */
    double cpu_share;       /* CPU time of the timed runs / (wall time x threads): < 1 when other
                               processes took the cores (the rates are then low) */
    bool s_ok;
} cliff_row;

/* --speed-model: what is measured, and where */
typedef struct {
    const char *path;       /* NULL: no speed measurement */
    char name[128];         /* general.name (or the file name) */
    char desc[400];         /* general.description, "" when absent */
    char cpu[128];          /* /proc/cpuinfo "model name" */
    char type[32];          /* its dominant tensor type */
    bool synthetic;         /* kvant.synthetic, or a description saying SYNTHETIC */
    double bpw;             /* as given */
    int n_pp, n_tg, reps, n_threads;
    kvant_ptq_clip clip;    /* --speed-clip (default: --clip) */
} cliff_speed;

static void cliff_help(void) {
    printf("usage: kvant cliff -m MODEL -f TEXT [-c 512] [--chunks N] [-o DIR] [--json]\n"
           "                   [--bits 8,6,5,4,3,2] [--schemes absmax,zeropoint]\n"
           "                   [--grans tensor,channel,group:32,group:64,group:128]\n"
           "                   [--clip mse|none] [--calib TEXT|none] [--fallback channel|f16|f32]\n"
           "                   [--no-gptq] [--tensor-bits L] [--no-llama] [-t N]\n"
           "                   [--speed-model FILE [--speed-pp 128] [--speed-tg 32] [--speed-reps 2]\n"
           "                    [--speed-clip mse|none]]\n"
           "\n"
           "The precision cliff: quantizes MODEL (a GGUF, F32 or F16) with every PTQ\n"
           "scheme x granularity x bit width (kvant quantize --scheme ...), and with\n"
           "llama.cpp's types F16 Q8_0 Q5_1 Q5_0 Q4_1 Q4_0 (kvant quantize TYPE, byte-\n"
           "identical to llama.cpp's files), and measures each file's perplexity on TEXT\n"
           "(llama.cpp's method, as kvant ppl) and its KL divergence from MODEL.  Bits per\n"
           "weight = 8 x tensor bytes / parameters, over ALL tensors (norms and tensors a\n"
           "type cannot hold, e.g. llama.cpp's F32 fallbacks, included).\n"
           "\n"
           "  -o DIR          where the quantized files, cliff.dat, cliff.gp, cliff.png and\n"
           "                  cliff.json go (default: cliff-out)\n"
           "  --clip C        clipping of the PTQ runs (default mse)\n"
           "  --calib T       calibration text for the clipping (default: the last 64 KiB of\n"
           "                  TEXT, written to DIR/calib.txt, disjoint from the chunks scored\n"
           "                  unless TEXT is short); none: unweighted\n"
           "  --no-gptq       no GPTQ error compensation (default: GPTQ when calibrated)\n"
           "  --tensor-bits L other widths for some tensors (kvant quantize --tensor-bits)\n"
           "  --json          print the table as one JSON object\n"
           "  --no-llama      skip llama.cpp's types\n"
           "  -t N            threads (default: all CPUs), also of the speed runs\n"
           "\n"
           "Speed (the quality model is usually too small to time):\n"
           "  --speed-model F a GGUF in F16 or F32, typically a synthetic model of a real shape\n"
           "                  (kvant synth --shape stories110M --type F16 -o F).  For every row, F\n"
           "                  is quantized with the row's settings (the same llama.cpp type, or the\n"
           "                  same scheme, bits, granularity, --fallback and --tensor-bits; the\n"
           "                  clipping of --speed-clip) but WITHOUT calibration or GPTQ (the text\n"
           "                  belongs to MODEL), to DIR/speed-NAME.gguf, which is timed as\n"
           "                  kvant bench does and deleted.  The table and JSON gain the speed\n"
           "                  file's bits per weight and prefill / decode tokens/s (the median of\n"
           "                  the timed runs, after one warm-up; with 2 runs their mean); the\n"
           "                  header names F and the CPU; cliff.png gets a second panel, decode\n"
           "                  tokens/s against the speed file's bits per weight.\n"
           "  --speed-pp N    prefill: one batch of N random tokens (default 128; 0 skips it)\n"
           "  --speed-tg N    decode: N single-token steps (default 32; 0 skips it)\n"
           "  --speed-reps R  timed runs of each (default 2)\n"
           "  --speed-clip C  clipping of the speed model's PTQ runs (default: as --clip).  The\n"
           "                  types and bytes do not depend on it, and throughput does not depend\n"
           "                  on weight values, but mse searches every group's range on one core:\n"
           "                  minutes per row on a 100M model (zero-point: tens of minutes);\n"
           "                  none makes it seconds\n"
           "Other processes on the cores make a multi-threaded decode wait at every barrier\n"
           "(rates fall 10x and more), so each test first waits (at most 10 s) until the\n"
           "CPUs are under 20%% busy, and timed runs that got under 75%% of the threads' CPU\n"
           "time are repeated (after another such wait, if it ends quiet) up to twice,\n"
           "keeping the attempt with the most; that share is the table's CPU%% column\n"
           "(cpu_share in the JSON).\n"
           "Progress on stderr; the table on stdout.\n");
}

/* splits a comma list into at most max items (pointers into a copy) */
static int split(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

static double file_mib(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size / 1048576.0 : 0.0;
}

/* perplexity + KL of one file; fills r */
static bool measure(const char *path, kvant_model *base, const char *text, size_t len, const kvant_ppl_params *pp,
                    int n_threads, cliff_row *r) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = n_threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) { fprintf(stderr, "kvant cliff: %s: %s\n", path, st.msg); return false; }
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    r->bpw = info.n_params ? 8.0 * (double)info.weight_bytes / (double)info.n_params : 0.0;
    r->file_mib = file_mib(path);
    kvant_ppl_params p = *pp;
    p.kl_base = base;
    kvant_ppl_result res;
    bool ok = kvant_perplexity(m, text, len, &p, &res, &st) == KVANT_OK;
    if (!ok) fprintf(stderr, "kvant cliff: %s: %s\n", path, st.msg);
    else {
        r->ppl = res.ppl;
        r->ppl_err = res.ppl_err;
        r->kl_mean = res.kl_mean;
        r->kl_p99 = res.kl_p99;
        r->same_top = res.same_top;
        r->ok = true;
    }
    kvant_model_free(m);
    return ok;
}

/* ---- --speed-model ------------------------------------------------------------ */
static double sd_of(const double *v, int n) {
    double m = 0, q = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
    return n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

/* the dominant tensor type of m (by bytes), as kvant bench names a model */
static void main_type(kvant_model *m, char *out, size_t cap) {
    size_t best = 0;
    snprintf(out, cap, "?");
    for (int i = 0; i < kvant_model_n_tensors(m); i++) {
        kvant_tensor_info ti, tj;
        kvant_model_tensor(m, i, &ti);
        size_t sum = 0;
        for (int j = 0; j < kvant_model_n_tensors(m); j++) {
            kvant_model_tensor(m, j, &tj);
            if (!strcmp(ti.type_name, tj.type_name)) sum += tj.nbytes;
        }
        if (sum > best) { best = sum; snprintf(out, cap, "%s", ti.type_name); }
    }
}

/* /proc/cpuinfo's first "model name" */
static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        for (v++; *v == ' ' || *v == '\t'; v++) {}
        size_t n = strcspn(v, "\n");
        while (n && v[n - 1] == ' ') n--;
        snprintf(out, cap, "%.*s", (int)n, v);
        break;
    }
    fclose(f);
}

/* opens the speed model once: its names, type and bits per weight */
static bool speed_describe(cliff_speed *sp) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = sp->n_threads, .no_repack = 1};
    kvant_model *m = kvant_model_open(sp->path, &mp, &st);
    if (!m) { fprintf(stderr, "kvant cliff: --speed-model %s: %s\n", sp->path, st.msg); return false; }
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    snprintf(sp->name, sizeof sp->name, "%s", info.name ? info.name : sp->path);
    if (kvant_model_meta_str(m, "general.description", sp->desc, sizeof sp->desc) < 0) sp->desc[0] = 0;
    sp->synthetic = strstr(sp->desc, "SYNTHETIC") != NULL || !strncmp(sp->name, "synthetic", 9);
    main_type(m, sp->type, sizeof sp->type);
    sp->bpw = info.n_params ? 8.0 * (double)info.weight_bytes / (double)info.n_params : 0.0;
    kvant_model_free(m);
    if (strcmp(sp->type, "F16") && strcmp(sp->type, "F32") && strcmp(sp->type, "BF16")) {
        fprintf(stderr, "kvant cliff: --speed-model %s is %s; it must be F16 or F32 (e.g. kvant synth --type F16)\n",
                sp->path, sp->type);
        return false;
    }
    return true;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

#define CPU_SHARE_MIN 0.75
#define SPEED_RETRIES 2
#define QUIET_WAIT_S 10 /* most seconds to wait for the other processes to leave the cores */
#define QUIET_BUSY 0.2  /* ... until under this fraction of all CPUs is busy */

/* busy and total jiffies of all CPUs (/proc/stat); false when unreadable */
static bool cpu_jiffies(unsigned long long *busy, unsigned long long *total) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return false;
    unsigned long long v[8] = {0};
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                         &v[6], &v[7]);
    fclose(f);
    if (n < 4) return false;
    *total = 0;
    for (int i = 0; i < 8; i++) *total += v[i];
    *busy = *total - v[3] - v[4]; /* all but idle and iowait */
    return true;
}

/* Waits (at most QUIET_WAIT_S) until the machine's CPUs are mostly idle
 * while this process is idle: other processes' threads on the cores make a
 * multi-threaded decode wait at every barrier.  Returns the busy fraction
 * last seen (0..1 of all CPUs). */
static double wait_quiet(void) {
    double busy_frac = 0;
    for (int i = 0; i < QUIET_WAIT_S * 4; i++) {
        unsigned long long b0, t0, b1, t1;
        if (!cpu_jiffies(&b0, &t0)) return 0;
        usleep(250000);
        if (!cpu_jiffies(&b1, &t1) || t1 == t0) return 0;
        busy_frac = (double)(b1 - b0) / (double)(t1 - t0);
        if (busy_frac < QUIET_BUSY) break;
        if (i == 0) fprintf(stderr, "          speed: other processes keep %.0f%% of the CPUs busy; waiting up to %d s\n",
                            100.0 * busy_frac, QUIET_WAIT_S);
    }
    return busy_frac;
}

/* prefill and decode tokens/s of one quantized speed file, as kvant bench
 * measures them (the same random tokens, one warm-up, sp->reps timed runs) */
static bool speed_measure(const char *path, const cliff_speed *sp, cliff_row *r) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = sp->n_threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) { fprintf(stderr, "kvant cliff: %s: %s\n", path, st.msg); return false; }
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    r->s_bpw = in.n_params ? 8.0 * (double)in.weight_bytes / (double)in.n_params : 0.0;
    r->s_mib = file_mib(path);
    kvant_seq_params sq = kvant_seq_default();
    sq.n_ctx = (sp->n_pp > sp->n_tg ? sp->n_pp : sp->n_tg) + 1;
    kvant_seq *seq = kvant_seq_new_ex(m, &sq, &st);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)sq.n_ctx);
    float *logits = malloc(sizeof(float) * (size_t)in.vocab_size);
    double *ts = malloc(sizeof(double) * (size_t)sp->reps);
    bool ok = false;
    if (!seq || !toks || !logits || !ts) { fprintf(stderr, "kvant cliff: %s: %s\n", path, seq ? "out of memory" : st.msg); goto done; }
    uint64_t x = 12345; /* kvant bench's tokens */
    for (int i = 0; i < sq.n_ctx; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)in.vocab_size);
    }
    double cpu = 0, wall = 0;
    for (int test = 0; test < 2; test++) {
        const bool gen = test == 1;
        const int n = gen ? sp->n_tg : sp->n_pp;
        if (n == 0) continue;
        wait_quiet();
        if (cli_bench_run(seq, toks, n, gen, logits, "kvant cliff: speed") < 0) goto done; /* warm-up */
        /* runs that got under CPU_SHARE_MIN of the threads' CPU time (another
         * process had the cores: the rates collapse) are repeated, at most
         * SPEED_RETRIES times; the attempt with the most CPU is kept */
        double best_share = -1, best_cpu = 0, best_wall = 0;
        for (int attempt = 0; attempt <= SPEED_RETRIES; attempt++) {
            if (attempt) {
                fprintf(stderr, "          speed: %s%d got %.0f%% of %d threads' CPU time\n", gen ? "tg" : "pp", n,
                        100.0 * best_share, sp->n_threads);
                if (wait_quiet() >= QUIET_BUSY) break; /* still busy: another try would measure the same */
                fprintf(stderr, "          speed: %s%d again\n", gen ? "tg" : "pp", n);
            }
            const double c0 = cpu_seconds(), w0 = kvant_time_ms();
            for (int i = 0; i < sp->reps; i++)
                if ((ts[i] = cli_bench_run(seq, toks, n, gen, logits, "kvant cliff: speed")) < 0) goto done;
            const double c = cpu_seconds() - c0, w = (kvant_time_ms() - w0) * 1e-3;
            const double share = w > 0 ? c / (w * sp->n_threads) : 0.0;
            if (share > best_share) {
                best_share = share;
                best_cpu = c;
                best_wall = w;
                const double sd = sd_of(ts, sp->reps), med = cli_median(ts, sp->reps);
                if (gen) { r->tg_ts = med; r->tg_sd = sd; }
                else { r->pp_ts = med; r->pp_sd = sd; }
            }
            if (share >= CPU_SHARE_MIN) break;
        }
        cpu += best_cpu;
        wall += best_wall;
    }
    r->cpu_share = wall > 0 ? cpu / (wall * sp->n_threads) : 0.0;
    ok = r->s_ok = true;
done:
    free(ts);
    free(logits);
    free(toks);
    kvant_seq_free(seq);
    kvant_model_free(m);
    return ok;
}

/* one progress line on stderr */
static void progress(const cliff_row *r, int i, int total, bool speed) {
    if (r->ok) fprintf(stderr, "[%3d/%3d] %-16s %6.3f bpw  PPL %.4f  KL %.5f", i, total, r->name, r->bpw, r->ppl, r->kl_mean);
    else fprintf(stderr, "[%3d/%3d] %-16s failed", i, total, r->name);
    if (speed && r->s_ok) fprintf(stderr, "  | speed %6.3f bpw  pp %.2f t/s  tg %.2f t/s  (CPU share %.2f)", r->s_bpw, r->pp_ts,
                                  r->tg_ts, r->cpu_share);
    else if (speed) fprintf(stderr, "  | speed failed");
    fprintf(stderr, "\n");
}

/* gnuplot's style of a family: today's without a speed panel; with one,
 * explicit colours (one per granularity, the scheme by point and dash) so both
 * panels draw a family alike */
static void family_style(char *out, size_t cap, const char *fam, bool speed) {
    if (!strcmp(fam, "llama.cpp")) { snprintf(out, cap, "points pt 7 ps 1.8 lc rgb 'black'"); return; }
    if (!speed) { snprintf(out, cap, "linespoints pt 5"); return; }
    static const char *const grans[] = {"tensor", "channel", "g32", "g64", "g128"};
    static const char *const cols[] = {"#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00", "#a65628"};
    const char *g = strchr(fam, ' ');
    g = g ? g + 1 : fam;
    int c = 5;
    for (int i = 0; i < 5; i++)
        if (!strcmp(g, grans[i])) c = i;
    const bool zp = !strncmp(fam, "zp", 2);
    snprintf(out, cap, "linespoints pt %d ps 1.2 lw 2 dt %d lc rgb '%s'", zp ? 7 : 5, zp ? 2 : 1, cols[c]);
}

static void write_plot(const char *dir, const cliff_row *rows, int n, const char *model, double base_ppl,
                       const cliff_speed *sp) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cliff.dat", dir);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kvant cliff: cannot write %s\n", path); return; }
    const bool speed = sp->path != NULL;
    /* one gnuplot data block per family (blank-line separated, indexed) */
    char fams[32][32];
    int nf = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int k = 0; k < nf; k++) seen |= !strcmp(fams[k], rows[i].family);
        if (!seen && nf < 32) snprintf(fams[nf++], 32, "%s", rows[i].family);
    }
    for (int k = 0; k < nf; k++) {
        fprintf(f, "# %s%s\n", fams[k], speed ? ": bpw PPL name KL speed-bpw pp-t/s tg-t/s" : "");
        for (int i = 0; i < n; i++) {
            const cliff_row *r = &rows[i];
            if (!(r->ok || (speed && r->s_ok)) || strcmp(r->family, fams[k])) continue;
            if (r->ok) fprintf(f, "%.4f %.5f %s %.6f", r->bpw, r->ppl, r->name, r->kl_mean);
            else fprintf(f, "? ? %s ?", r->name);
            if (speed && r->s_ok) fprintf(f, " %.4f %.3f %.3f", r->s_bpw, r->pp_ts, r->tg_ts);
            else if (speed) fprintf(f, " ? ? ?");
            fprintf(f, "\n");
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/cliff.gp", dir);
    f = fopen(path, "w");
    if (!f) return;
    if (!speed)
        fprintf(f, "set terminal pngcairo size 1200,800 font ',11'\nset output '%s/cliff.png'\n"
                   "set title 'precision cliff: %s (perplexity vs bits per weight, all tensors counted)' noenhanced\n",
                dir, model);
    else
        fprintf(f, "set terminal pngcairo size 1900,820 font ',11'\nset output '%s/cliff.png'\n"
                   "set datafile missing '?'\n"
                   "set multiplot layout 1,2 title 'precision cliff: quality of %s, speed of %s%s (%s, %d threads)' noenhanced\n"
                   "set title 'perplexity vs bits per weight (%s)' noenhanced\n"
                   "unset key\n",
                dir, model, sp->path, sp->synthetic ? ", SYNTHETIC" : "", sp->cpu, sp->n_threads, model);
    fprintf(f, "set xlabel 'bits per weight (tensor bytes x 8 / parameters)'\nset ylabel 'perplexity (log scale)'\n"
               "set logscale y\nset grid\n%s"
               "set arrow from graph 0, first %.5f to graph 1, first %.5f nohead dt 2 lc rgb 'gray'\n"
               "plot ", speed ? "" : "set key outside right top noenhanced\n", base_ppl, base_ppl);
    char style[160];
    for (int k = 0; k < nf; k++) {
        const bool llama = !strcmp(fams[k], "llama.cpp");
        family_style(style, sizeof style, fams[k], speed);
        fprintf(f, "%s'%s/cliff.dat' index %d using 1:2 with %s title '%s'", k ? ", \\\n     " : "", dir, k, style, fams[k]);
        if (llama)
            fprintf(f, ", \\\n     '%s/cliff.dat' index %d using 1:2:3 with labels offset 1.5,0.6 noenhanced notitle", dir, k);
    }
    fprintf(f, "\n");
    if (speed) {
        const bool tg = sp->n_tg > 0; /* --speed-tg 0: the prefill rate instead */
        fprintf(f, "unset arrow\nunset logscale y\nset yrange [0:*]\nset key outside right top noenhanced\n"
                   "set title '%s tokens/s (%s%d, median of %d) vs bits per weight: %s%s' noenhanced\n"
                   "set xlabel 'bits per weight of the speed model (tensor bytes x 8 / parameters)'\n"
                   "set ylabel '%s tokens/s'\nplot ",
                tg ? "decode" : "prefill", tg ? "tg" : "pp", tg ? sp->n_tg : sp->n_pp, sp->reps, sp->name,
                sp->synthetic ? " (SYNTHETIC weights)" : "", tg ? "decode" : "prefill");
        for (int k = 0; k < nf; k++) {
            const bool llama = !strcmp(fams[k], "llama.cpp");
            family_style(style, sizeof style, fams[k], speed);
            fprintf(f, "%s'%s/cliff.dat' index %d using 5:%d with %s title '%s'", k ? ", \\\n     " : "", dir, k, tg ? 7 : 6, style, fams[k]);
            if (llama)
                fprintf(f, ", \\\n     '%s/cliff.dat' index %d using 5:%d:3 with labels offset 1.5,0.6 noenhanced notitle", dir, k,
                        tg ? 7 : 6);
        }
        fprintf(f, "\nunset multiplot\n");
    }
    fclose(f);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gnuplot '%s/cliff.gp'", dir);
    if (system(cmd) != 0) fprintf(stderr, "kvant cliff: gnuplot failed (the data is in %s/cliff.dat)\n", dir);
    else fprintf(stderr, "plot: %s/cliff.png\n", dir);
}

/* s as a JSON string (quotes, backslashes and control bytes escaped) */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void print_json(FILE *f, const cliff_row *rows, int n, const char *model, const char *text_path, int n_ctx,
                       const kvant_ppl_result *base, const char *clip, const char *calib, bool gptq,
                       const cliff_speed *sp) {
    const kvant_ppl_result base_res = *base;
    fprintf(f, "{\"model\": \"%s\", \"text\": \"%s\", \"n_ctx\": %d, \"chunks\": %d, \"base_ppl\": %.6f, \"clip\": \"%s\", "
           "\"calib\": \"%s\", \"gptq\": %s, ", model, text_path, n_ctx, base_res.n_chunks, base_res.ppl, clip,
           calib ? calib : "none", gptq && calib ? "true" : "false");
    if (sp->path) {
        fprintf(f, "\"speed\": {\"model\": ");
        json_str(f, sp->path);
        fprintf(f, ", \"name\": ");
        json_str(f, sp->name);
        fprintf(f, ", \"description\": ");
        json_str(f, sp->desc);
        fprintf(f, ", \"synthetic\": %s, \"type\": \"%s\", \"bpw\": %.4f, \"cpu\": ", sp->synthetic ? "true" : "false",
                sp->type, sp->bpw);
        json_str(f, sp->cpu);
        fprintf(f, ", \"kernels\": \"%s\", \"threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"repetitions\": %d, "
                   "\"stat\": \"median\", \"clip\": \"%s\", \"calib\": \"none\", \"gptq\": false}, ",
                kvant_kernel_tier(), sp->n_threads, sp->n_pp, sp->n_tg, sp->reps, cli_choice_name(cli_ptq_clips, sp->clip));
    }
    fprintf(f, "\"rows\": [");
    for (int i = 0; i < n; i++) {
        const cliff_row *r = &rows[i];
        fprintf(f, "%s\n  {\"name\": \"%s\", \"family\": \"%s\", \"bits\": %d, \"bpw\": %.4f, \"file_mib\": %.4f, \"ok\": %s, "
               "\"ppl\": %.6f, \"ppl_err\": %.6f, \"kl_mean\": %.6f, \"kl_p99\": %.6f, \"same_top\": %.6f",
               i ? "," : "", r->name, r->family, r->bits, r->bpw, r->file_mib, r->ok ? "true" : "false", r->ppl,
               r->ppl_err, r->kl_mean, r->kl_p99, r->same_top);
        if (sp->path)
            fprintf(f, ", \"speed_ok\": %s, \"speed_bpw\": %.4f, \"speed_file_mib\": %.4f, \"pp_ts\": %.4f, \"pp_sd\": %.4f, "
                       "\"tg_ts\": %.4f, \"tg_sd\": %.4f, \"cpu_share\": %.3f",
                    r->s_ok ? "true" : "false", r->s_bpw, r->s_mib, r->pp_ts, r->pp_sd, r->tg_ts, r->tg_sd, r->cpu_share);
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
}

int cmd_cliff(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant cliff", false};
    const char *model = NULL, *text_path = NULL, *dir = "cliff-out", *calib = NULL;
    kvant_ptq_clip clip_v = KVANT_PTQ_CLIP_MSE;
    kvant_ptq_fallback fallback = KVANT_PTQ_FALLBACK_CHANNEL;
    char bits_s[64] = "8,6,5,4,3,2", schemes_s[64] = "absmax,zeropoint",
         grans_s[128] = "tensor,channel,group:32,group:64,group:128";
    int n_ctx = 512, n_chunks = 0, n_threads = 0;
    bool json = false, llama = true, gptq = true;
    const char *tensor_bits = NULL;
    cliff_speed sp = {.n_pp = 128, .n_tg = 32, .reps = 2};
    bool speed_clip_set = false;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { cliff_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) model = cli_str(&a);
        else if (cli_is(&a, "-f", "--file")) text_path = cli_str(&a);
        else if (cli_is(&a, "-c", "--ctx")) n_ctx = cli_int(&a, 8, 1 << 20);
        else if (cli_is(&a, "--chunks", NULL)) n_chunks = cli_int(&a, 1, 1 << 30);
        else if (cli_is(&a, "-o", "--out-dir")) dir = cli_str(&a);
        else if (cli_is(&a, "--clip", NULL)) clip_v = (kvant_ptq_clip)cli_choice_arg(&a, cli_ptq_clips);
        else if (cli_is(&a, "--calib", NULL)) calib = cli_str(&a);
        else if (cli_is(&a, "--fallback", NULL)) fallback = (kvant_ptq_fallback)cli_choice_arg(&a, cli_ptq_fallbacks);
        else if (cli_is(&a, "--bits", NULL)) { const char *v = cli_str(&a); if (v) snprintf(bits_s, sizeof bits_s, "%s", v); }
        else if (cli_is(&a, "--schemes", NULL)) { const char *v = cli_str(&a); if (v) snprintf(schemes_s, sizeof schemes_s, "%s", v); }
        else if (cli_is(&a, "--grans", NULL)) { const char *v = cli_str(&a); if (v) snprintf(grans_s, sizeof grans_s, "%s", v); }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--no-llama", NULL)) llama = false;
        else if (cli_is(&a, "--no-gptq", NULL)) gptq = false;
        else if (cli_is(&a, "--tensor-bits", NULL)) tensor_bits = cli_str(&a);
        else if (cli_is(&a, "-t", "--threads")) n_threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "--speed-model", NULL)) sp.path = cli_str(&a);
        else if (cli_is(&a, "--speed-pp", NULL)) sp.n_pp = cli_int(&a, 0, 1 << 16);
        else if (cli_is(&a, "--speed-tg", NULL)) sp.n_tg = cli_int(&a, 0, 1 << 16);
        else if (cli_is(&a, "--speed-reps", NULL)) sp.reps = cli_int(&a, 1, 1000);
        else if (cli_is(&a, "--speed-clip", NULL)) { sp.clip = (kvant_ptq_clip)cli_choice_arg(&a, cli_ptq_clips); speed_clip_set = true; }
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    const char *clip = cli_choice_name(cli_ptq_clips, clip_v);
    if (!speed_clip_set) sp.clip = clip_v;
    if (sp.path && sp.n_pp == 0 && sp.n_tg == 0) {
        fprintf(stderr, "kvant cliff: --speed-pp 0 and --speed-tg 0 leave nothing to time\n");
        return CLI_USAGE;
    }
    if (sp.path && access(sp.path, R_OK)) { fprintf(stderr, "kvant cliff: cannot open %s\n", sp.path); return CLI_USAGE; }
    if (!model || !text_path) { fprintf(stderr, "kvant cliff: -m MODEL and -f TEXT are required (see --help)\n"); return CLI_USAGE; }
    if (access(model, R_OK) || access(text_path, R_OK)) {
        fprintf(stderr, "kvant cliff: cannot open %s\n", access(model, R_OK) ? model : text_path);
        return CLI_USAGE;
    }
    const char *bits_l[8], *schemes_l[4], *grans_l[8];
    const int nb = split(bits_s, bits_l, 8), ns = split(schemes_s, schemes_l, 4), ng = split(grans_s, grans_l, 8);
    kvant_ptq_scheme schemes_v[4];
    kvant_ptq_granularity grans_v[8];
    int groups_v[8];
    for (int i = 0; i < ns; i++) {
        int v;
        if (!cli_choice_of(cli_ptq_schemes, schemes_l[i], &v)) {
            fprintf(stderr, "kvant cliff: unknown scheme '%s' in --schemes (absmax, zeropoint)\n", schemes_l[i]);
            return CLI_USAGE;
        }
        schemes_v[i] = (kvant_ptq_scheme)v;
    }
    for (int i = 0; i < ng; i++)
        if (!cli_granularity_of(grans_l[i], &grans_v[i], &groups_v[i])) {
            fprintf(stderr, "kvant cliff: bad granularity '%s' in --grans (tensor, channel, group:G)\n", grans_l[i]);
            return CLI_USAGE;
        }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvant cliff: cannot create %s\n", dir); return CLI_FAIL; }

    size_t len = 0;
    char *text = cli_read_file(text_path, &len);
    if (!text) { fprintf(stderr, "kvant cliff: cannot read %s\n", text_path); return CLI_FAIL; }
    char calib_path[1024];
    if (!calib) { /* the text's last 64 KiB */
        snprintf(calib_path, sizeof calib_path, "%s/calib.txt", dir);
        FILE *f = fopen(calib_path, "wb");
        const size_t n = len < 65536 ? len : 65536;
        if (!f || fwrite(text + len - n, 1, n, f) != n) { fprintf(stderr, "kvant cliff: cannot write %s\n", calib_path); if (f) fclose(f); free(text); return CLI_FAIL; }
        fclose(f);
        calib = calib_path;
    } else if (!strcmp(calib, "none")) calib = NULL;

    sp.n_threads = n_threads ? n_threads : kvant_default_threads();
    cpu_name(sp.cpu, sizeof sp.cpu);
    if (sp.path && !speed_describe(&sp)) { free(text); return CLI_FAIL; }
    if (sp.path)
        fprintf(stderr, "speed model %s (%s, %s, %.3f bpw%s) on %s, %d threads: pp%d, tg%d, %d runs; clip %s, no calibration\n",
                sp.path, sp.name, sp.type, sp.bpw, sp.synthetic ? ", SYNTHETIC" : "", sp.cpu, sp.n_threads, sp.n_pp,
                sp.n_tg, sp.reps, cli_choice_name(cli_ptq_clips, sp.clip));

    kvant_status st;
    kvant_model_params mp = {.n_threads = n_threads};
    kvant_model *base = kvant_model_open(model, &mp, &st);
    if (!base) { fprintf(stderr, "kvant cliff: %s\n", st.msg); free(text); return cli_status_exit(&st); }
    kvant_ppl_params pp = {.n_ctx = n_ctx, .n_chunks = n_chunks};
    kvant_ppl_result base_res;
    if (kvant_perplexity(base, text, len, &pp, &base_res, &st)) { fprintf(stderr, "kvant cliff: %s\n", st.msg); kvant_model_free(base); free(text); return CLI_FAIL; }
    fprintf(stderr, "base %s: PPL %.4f over %d chunks\n", model, base_res.ppl, base_res.n_chunks);

    const int cap = ns * ng * nb + 8, total = ns * ng * nb + (llama ? 6 : 0);
    cliff_row *rows = calloc((size_t)cap, sizeof *rows);
    int n = 0;
    static const char *const k_llama[] = {"F16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"};
    for (int i = 0; llama && i < 6; i++) {
        cliff_row *r = &rows[n++];
        snprintf(r->name, sizeof r->name, "%s", k_llama[i]);
        snprintf(r->family, sizeof r->family, "llama.cpp");
        char out[1024];
        snprintf(out, sizeof out, "%s/llama-%s.gguf", dir, k_llama[i]);
        kvant_quantize_params qp = {.n_threads = n_threads, .quiet = true};
        if (!cli_ftype_of(k_llama[i], &qp.type)) continue; /* every one of them is in kvant's list */
        if (kvant_quantize(model, out, &qp, &st)) fprintf(stderr, "kvant cliff: %s: %s\n", k_llama[i], st.msg);
        else measure(out, base, text, len, &pp, n_threads, r);
        if (sp.path) { /* the same type on the speed model */
            snprintf(out, sizeof out, "%s/speed-%s.gguf", dir, k_llama[i]);
            fprintf(stderr, "          %-16s speed: quantizing %s ...\n", r->name, sp.path);
            if (kvant_quantize(sp.path, out, &qp, &st)) fprintf(stderr, "kvant cliff: speed %s: %s\n", k_llama[i], st.msg);
            else speed_measure(out, &sp, r);
            unlink(out);
        }
        progress(r, n, total, sp.path != NULL);
    }
    for (int si = 0; si < ns; si++)
        for (int gi = 0; gi < ng; gi++)
            for (int bi = 0; bi < nb; bi++) {
                cliff_row *r = &rows[n++];
                r->scheme = schemes_l[si];
                r->gran = grans_l[gi];
                r->bits = atoi(bits_l[bi]);
                const char *g = grans_l[gi];
                const char *gs = !strncmp(g, "group:", 6) ? g + 6 : g;
                const bool zp = schemes_v[si] == KVANT_PTQ_ZEROPOINT;
                snprintf(r->name, sizeof r->name, "%s%d-%s%s", zp ? "zp" : "absmax", r->bits,
                         !strncmp(g, "group:", 6) ? "g" : "", gs);
                snprintf(r->family, sizeof r->family, "%s %s%s", zp ? "zp" : "absmax", !strncmp(g, "group:", 6) ? "g" : "", gs);
                char out[1024];
                snprintf(out, sizeof out, "%s/ptq-%s.gguf", dir, r->name);
                kvant_ptq_params qp = {.scheme = schemes_v[si], .granularity = grans_v[gi], .group = groups_v[gi],
                                       .bits = r->bits, .clip = clip_v,
                                       .calib_path = calib, .gptq = gptq && calib, .fallback = fallback,
                                       .tensor_bits = tensor_bits, .n_threads = n_threads, .quiet = true};
                if (kvant_ptq_quantize(model, out, &qp, NULL, &st)) fprintf(stderr, "kvant cliff: %s: %s\n", r->name, st.msg);
                else measure(out, base, text, len, &pp, n_threads, r);
                if (sp.path) { /* the same quantizer on the speed model, without the other model's calibration */
                    kvant_ptq_params sq = qp;
                    sq.calib_path = NULL;
                    sq.gptq = false;
                    sq.clip = sp.clip;
                    snprintf(out, sizeof out, "%s/speed-%s.gguf", dir, r->name);
                    fprintf(stderr, "          %-16s speed: quantizing %s ...\n", r->name, sp.path);
                    if (kvant_ptq_quantize(sp.path, out, &sq, NULL, &st)) fprintf(stderr, "kvant cliff: speed %s: %s\n", r->name, st.msg);
                    else speed_measure(out, &sp, r);
                    unlink(out);
                }
                progress(r, n, total, sp.path != NULL);
            }

    {
        char jp[1024];
        snprintf(jp, sizeof jp, "%s/cliff.json", dir);
        FILE *jf = fopen(jp, "w");
        if (jf) { print_json(jf, rows, n, model, text_path, n_ctx, &base_res, clip, calib, gptq, &sp); fclose(jf); }
    }
    if (json) {
        print_json(stdout, rows, n, model, text_path, n_ctx, &base_res, clip, calib, gptq, &sp);
    } else {
        printf("precision cliff: %s on %s, c=%d, %d chunks; base PPL %.4f; PTQ clip %s, calibration %s, GPTQ %s\n",
               model, text_path, n_ctx, base_res.n_chunks, base_res.ppl, clip, calib ? calib : "none",
               gptq && calib ? "on" : "off");
        if (sp.path)
            printf("speed: %s (%s%s%s%s), %s, %.3f bpw; CPU %s, %d threads, kernels %s; pp%d / tg%d tokens/s, median of %d "
                   "runs after a warm-up, as kvant bench\n",
                   sp.path, sp.name, sp.desc[0] ? ": " : "", sp.desc, sp.synthetic && !strstr(sp.desc, "SYNTHETIC") ? ", SYNTHETIC" : "",
                   sp.type, sp.bpw, sp.cpu, sp.n_threads, kvant_kernel_tier(), sp.n_pp, sp.n_tg, sp.reps);
        if (!sp.path) {
            printf("| %-16s | %6s | %8s | %9s | %8s | %8s | %8s | %8s |\n", "type", "bits", "bpw", "file MiB", "PPL",
                   "KL mean", "KL p99", "same top");
            printf("|------------------|--------|----------|-----------|----------|----------|----------|----------|\n");
        } else {
            printf("| %-16s | %6s | %8s | %9s | %8s | %8s | %8s | %8s | %9s | %8s | %8s | %4s |\n", "type", "bits", "bpw",
                   "file MiB", "PPL", "KL mean", "KL p99", "same top", "speed bpw", "pp t/s", "tg t/s", "CPU%");
            printf("|------------------|--------|----------|-----------|----------|----------|----------|----------|"
                   "-----------|----------|----------|------|\n");
        }
        for (int i = 0; i < n; i++) {
            const cliff_row *r = &rows[i];
            if (!r->ok && !(sp.path && r->s_ok)) { printf("| %-16s | failed |\n", r->name); continue; }
            if (r->ok)
                printf("| %-16s | %6d | %8.3f | %9.3f | %8.4f | %8.5f | %8.5f | %7.2f%% |", r->name, r->bits, r->bpw,
                       r->file_mib, r->ppl, r->kl_mean, r->kl_p99, 100.0 * r->same_top);
            else
                printf("| %-16s | %6d | %8s | %9s | %8s | %8s | %8s | %8s |", r->name, r->bits, "failed", "", "", "", "", "");
            if (sp.path && r->s_ok)
                printf(" %9.3f | %8.2f | %8.2f | %4.0f |", r->s_bpw, r->pp_ts, r->tg_ts, 100.0 * r->cpu_share);
            else if (sp.path) printf(" %9s | %8s | %8s | %4s |", "failed", "", "", "");
            printf("\n");
        }
        if (sp.path)
            printf("\nspeed bpw, pp t/s, tg t/s: %s%s quantized with each row's settings (the same llama.cpp type, or the same\n"
                   "scheme, bits, granularity, fallback and tensor bits; clip %s) but without calibration or GPTQ (the\n"
                   "calibration text belongs to the quality model); bits per weight over all its tensors.  CPU%%: the\n"
                   "timed runs' CPU time / (wall time x threads); well under 100, other processes had the cores and\n"
                   "the rates are low.\n",
                   sp.path, sp.synthetic ? " (SYNTHETIC: random weights; speed only)" : "", cli_choice_name(cli_ptq_clips, sp.clip));
    }
    write_plot(dir, rows, n, model, base_res.ppl, &sp);
    free(rows);
    kvant_model_free(base);
    free(text);
    return CLI_OK;
}
