/* cmd_train.c - `kvant train`, and what `kvant distill` / `kvant qat`
 * share with it: the common flags, the progress bar, the summary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

const char *const cli_train_common_help =
    "  -f, --file TEXT      training text; its last 10% (from a line start) is the validation part\n"
    "  -o, --output OUT     checkpoint (GGUF, loadable by run/ppl); optimizer state in OUT.state\n"
    "      --steps N        optimizer steps in all (default 1000; with --resume: the total to reach)\n"
    "      --stop-at N      stop after step N (schedule still over --steps; continue with --resume)\n"
    "      --batch B        sequences per step (default 8)\n"
    "      --ctx T          tokens per sequence (default 128)\n"
    "      --lr LR          peak learning rate (default 1e-3); linear warm-up, cosine decay\n"
    "      --min-lr LR      final learning rate (default lr/10)\n"
    "      --warmup N       warm-up steps (default steps/20)\n"
    "      --wd W           AdamW weight decay on matrices (default 0.1)\n"
    "      --clip C         global gradient-norm bound (default 1; 0: off)\n"
    "      --eval-every K   validation loss every K steps (default 100; 0: start and end only)\n"
    "      --eval-windows W validation windows of T tokens at most (default 64)\n"
    "      --seed S         init and data seed (default 1337)\n"
    "      --resume CKPT    continue from a checkpoint written by this command (CKPT.state beside it)\n"
    "      --log CSV        write step,loss,val_loss,lr per step\n"
    "  -t, --threads N      threads (default: all CPUs)\n"
    "      --json           print the result as one JSON object on stdout\n";

static bool g_json;

/* true if argv[a->i] was one of the shared flags (consumed) */
bool cli_train_flag(cli_args *a, kvant_train_params *p) {
    if (cli_is(a, "-f", "--file")) p->text_path = cli_str(a);
    else if (cli_is(a, "-o", "--output")) p->out_path = cli_str(a);
    else if (cli_is(a, "--steps", NULL)) p->steps = cli_int(a, 0, 100000000);
    else if (cli_is(a, "--stop-at", NULL)) p->stop_at = cli_int(a, 1, 100000000);
    else if (cli_is(a, "--batch", NULL)) p->batch = cli_int(a, 1, 4096);
    else if (cli_is(a, "--ctx", "-c")) p->ctx = cli_int(a, 2, 65536);
    else if (cli_is(a, "--lr", NULL)) p->lr = cli_float(a, 0, 10);
    else if (cli_is(a, "--min-lr", NULL)) p->min_lr = cli_float(a, 0, 10);
    else if (cli_is(a, "--warmup", NULL)) p->warmup = cli_int(a, 0, 100000000);
    else if (cli_is(a, "--wd", NULL)) p->weight_decay = cli_float(a, 0, 10);
    else if (cli_is(a, "--clip", NULL)) p->clip = cli_float(a, 0, 1e9f);
    else if (cli_is(a, "--eval-every", NULL)) p->eval_every = cli_int(a, 0, 100000000);
    else if (cli_is(a, "--eval-windows", NULL)) p->eval_windows = cli_int(a, 1, 1000000);
    else if (cli_is(a, "--seed", NULL)) p->seed = cli_u64(a);
    else if (cli_is(a, "--resume", NULL)) p->resume = cli_str(a);
    else if (cli_is(a, "--log", NULL)) p->log_csv = cli_str(a);
    else if (cli_is(a, "-t", "--threads")) p->n_threads = cli_int(a, 1, 1024);
    else if (cli_is(a, "--json", NULL)) g_json = true;
    else return false;
    return true;
}

static void fmt_time(double s, char *buf, size_t cap) {
    if (s < 0 || !isfinite(s)) s = 0;
    const int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%dh%02dm", t / 3600, t / 60 % 60);
    else snprintf(buf, cap, "%dm%02ds", t / 60, t % 60);
}

/* a redrawn bar on a terminal; on a log, a line per 5% and per validation */
static void progress(void *user, const kvant_train_progress *p) {
    const bool tty = *(const bool *)user;
    char eta[32];
    fmt_time(p->eta_s, eta, sizeof eta);
    const bool every = p->step == p->steps || (p->step * 20 / p->steps) != ((p->step - 1) * 20 / p->steps);
    if (!isnan(p->val_loss)) {
        fprintf(stderr, "%sstep %d/%d  loss %.4f  val loss %.4f (ppl %.3f)  lr %.2e  %.0f tok/s  ETA %s\n",
                tty ? "\r\033[K" : "", p->step, p->steps, p->loss, p->val_loss, exp(p->val_loss), p->lr,
                p->tokens_per_s, eta);
        return;
    }
    if (!tty) {
        if (every)
            fprintf(stderr, "step %d/%d  loss %.4f  |g| %.3f  lr %.2e  %.0f tok/s  ETA %s\n", p->step, p->steps, p->loss,
                    p->grad_norm, p->lr, p->tokens_per_s, eta);
        return;
    }
    const int width = 24, fill = (int)((double)p->step / p->steps * width);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %d/%d  loss %.4f  |g| %.3f  %.0f tok/s  ETA %s ", bar, p->step, p->steps, p->loss,
            p->grad_norm, p->tokens_per_s, eta);
    fflush(stderr);
}

/* runs the loop, prints the summary; returns the exit code */
int cli_train_run(const char *cmd, kvant_train_params *p) {
    if (!p->text_path || !p->out_path) {
        fprintf(stderr, "%s: -f TEXT and -o OUT are required (see --help)\n", cmd);
        return CLI_USAGE;
    }
    if (access(p->text_path, R_OK)) {
        fprintf(stderr, "%s: cannot read %s\n", cmd, p->text_path);
        return CLI_USAGE;
    }
    bool tty = isatty(2);
    p->progress = progress;
    p->user = &tty;
    kvant_train_result r;
    kvant_status st;
    if (kvant_train(p, &r, &st)) {
        fprintf(stderr, "%s: %s\n", cmd, st.msg);
        return cli_status_exit(&st);
    }
    const int64_t N = (int64_t)p->batch * p->ctx;
    char sp[96] = "";
    if (p->prune_sparsity > 0) snprintf(sp, sizeof sp, "  sparsity of the layer matrices: %.2f%%\n", 100 * r.sparsity);
    fprintf(stderr,
            "%s: %lld parameters, %lld training / %lld validation tokens\n"
            "  validation loss %.4f -> %.4f (ppl %.3f)\n"
            "  speed: %.0f training tok/s over the run; fastest step %.1f ms, fastest forward only %.1f ms = "
            "%.0f tok/s (%lld tokens, same threads): step / forward = %.2fx\n"
            "%s"
            "  wrote %s in %.1f s\n",
            cmd, (long long)r.n_params, (long long)r.n_train_tokens, (long long)r.n_val_tokens, r.init_val_loss,
            r.val_loss, r.val_ppl, r.train_tok_s, r.step_ms, r.fwd_ms, r.fwd_tok_s, (long long)N,
            r.fwd_ms > 0 ? r.step_ms / r.fwd_ms : 0, sp, p->out_path, r.seconds);
    if (g_json)
        printf("{\"n_params\": %lld, \"init_val_loss\": %.6f, \"val_loss\": %.6f, \"val_ppl\": %.6f, "
               "\"last_loss\": %.6f, \"step_ms\": %.3f, \"fwd_ms\": %.3f, \"train_tok_s\": %.1f, \"fwd_tok_s\": %.1f, "
               "\"step_over_fwd\": %.3f, \"sparsity\": %.5f, \"seconds\": %.2f}\n",
               (long long)r.n_params, r.init_val_loss, r.val_loss, r.val_ppl, r.last_loss, r.step_ms, r.fwd_ms,
               r.train_tok_s, r.fwd_tok_s, r.fwd_ms > 0 ? r.step_ms / r.fwd_ms : 0, r.sparsity, r.seconds);
    return CLI_OK;
}

static void train_help(void) {
    printf("usage: kvant train (-m MODEL | --config CFG --tokenizer-from MODEL) -f TEXT -o OUT.gguf [options]\n"
           "\n"
           "Trains a model of the Llama-2 layout in FP32 with AdamW (other families are\n"
           "refused by name): fine-tuning a GGUF (any weight type, dequantized), or from\n"
           "scratch from a config with seeded initialization.\n"
           "Batches are random windows of the text's first 90%%; the validation loss is\n"
           "measured on non-overlapping windows of the last 10%%.  Progress (loss, tokens/s,\n"
           "ETA) on stderr; at the end, the training step's cost against a forward pass\n"
           "over the same batch.\n"
           "\n"
           "  -m, --model MODEL    GGUF model to fine-tune\n"
           "      --config CFG     from scratch: dim=32,layers=4,heads=4,kv_heads=2,hidden=86\n"
           "                       (also head_dim, ctx, rope_base, tied=0/1; hidden defaults\n"
           "                       to 8*dim/3 rounded up to 32)\n"
           "      --tokenizer-from MODEL  GGUF whose tokenizer and vocabulary a config uses\n"
           "      --prune S        iterative pruning to sparsity S: in each of --prune-rounds K\n"
           "                       rounds (default 4), mask the smallest |w| of every output row\n"
           "                       of the layer matrices (attn q/k/v/output, ffn gate/up/down;\n"
           "                       cubic schedule S (1 - (1 - k/K)^3)), zero them, then\n"
           "                       fine-tune with the mask held\n"
           "      --prune-finetune-steps N  fine-tuning steps per round (--steps = K N)\n"
           "%s",
           cli_train_common_help);
}

int cmd_train(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant train", false};
    kvant_train_params p = kvant_train_default();
    p.prune_rounds = 4;
    int finetune = 0;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { train_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) p.model = cli_str(&a);
        else if (cli_is(&a, "--config", NULL)) p.config = cli_str(&a);
        else if (cli_is(&a, "--tokenizer-from", NULL)) p.tokenizer_from = cli_str(&a);
        else if (cli_is(&a, "--prune", NULL)) p.prune_sparsity = cli_float(&a, 0.001f, 0.999f);
        else if (cli_is(&a, "--prune-rounds", NULL)) p.prune_rounds = cli_int(&a, 1, 1000);
        else if (cli_is(&a, "--prune-finetune-steps", NULL)) finetune = cli_int(&a, 1, 10000000);
        else if (!cli_train_flag(&a, &p)) cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (finetune) p.steps = p.prune_rounds * finetune;
    if (!p.model == !p.config) {
        fprintf(stderr, "kvant train: give -m MODEL or --config CFG (see --help)\n");
        return CLI_USAGE;
    }
    if (p.config && !p.tokenizer_from) {
        fprintf(stderr, "kvant train: --config needs --tokenizer-from MODEL\n");
        return CLI_USAGE;
    }
    return cli_train_run("kvant train", &p);
}
