/* cmd_logits.c - `kvant logits`: the logits of every position of one causal
 * batch, as raw little-endian float32 [n][vocab], so that kvant can be
 * compared with another engine on the same file and the same ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void logits_help(void) {
    printf("usage: kvant logits -m MODEL (--ids 1,2,3 | -p TEXT) -o OUT.f32 [options]\n"
           "\n"
           "Runs the tokens as ONE causal batch (positions 0..n-1, an empty cache) and\n"
           "writes the logits of every position: little-endian float32, n rows of\n"
           "vocabulary-size values, row i = the distribution after tokens 0..i.\n"
           "Prints n and the vocabulary size on stderr.\n"
           "\n"
           "  -m, --model FILE       GGUF or llama2.c checkpoint (required)\n"
           "  -z, --tokenizer FILE   llama2.c tokenizer.bin (for .bin checkpoints)\n"
           "      --ids LIST         token ids, separated by commas or spaces\n"
           "  -p, --prompt TEXT      text to tokenize instead (BOS added when the vocabulary says so)\n"
           "  -o, --output FILE      where to write the logits (required)\n"
           "      --attn flash|naive attention kernel (default flash; naive is the reference)\n"
           "      --kv-type T        f32 (default here: the logits are for comparisons with F32\n"
           "                         references; every other command defaults to f16), f16, q8_0\n"
           "  -t, --threads N        threads (default: all CPUs)\n"
           "  -h, --help             this text\n");
}

/* "1,2, 3" -> ids; returns the count, or -1 on a malformed list */
static int parse_ids(const char *s, int32_t **out) {
    int cap = 64, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    while (*s) {
        while (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *p = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!p) {
                free(ids);
                return -1;
            }
            ids = p;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    *out = ids;
    return n;
}

int cmd_logits(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant logits", false};
    const char *path = NULL, *tokenizer = NULL, *ids_arg = NULL, *prompt = NULL, *out_path = NULL;
    kvant_attn attn = KVANT_ATTN_FLASH;
    /* the one command whose KV default is F32: its job is to be held to other
     * engines' F32 logits (../shared/reference), which F16 K/V would blur */
    kvant_kv_type kv_type = KVANT_KV_F32;
    int threads = 0;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { logits_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) tokenizer = cli_str(&a);
        else if (cli_is(&a, "--ids", NULL)) ids_arg = cli_str(&a);
        else if (cli_is(&a, "-p", "--prompt")) prompt = cli_str(&a);
        else if (cli_is(&a, "-o", "--output")) out_path = cli_str(&a);
        else if (cli_is(&a, "--attn", NULL)) attn = (kvant_attn)cli_choice_arg(&a, cli_attns);
        else if (cli_is(&a, "--kv-type", NULL)) kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path || !out_path || (!ids_arg == !prompt)) {
        fprintf(stderr, "kvant logits: need -m MODEL, -o OUT and exactly one of --ids or -p (see --help)\n");
        return CLI_USAGE;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (ids_arg && (n = parse_ids(ids_arg, &ids)) <= 0) {
        fprintf(stderr, "kvant logits: --ids wants non-negative integers separated by commas\n");
        free(ids);
        return CLI_USAGE;
    }

    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = tokenizer, .n_threads = threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) {
        fprintf(stderr, "kvant logits: %s\n", st.msg);
        free(ids);
        return cli_status_exit(&st);
    }
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    if (prompt) {
        ids = kvant_tokenize_all(m, prompt, strlen(prompt), true, &n, &st);
        if (!ids || n <= 0) {
            fprintf(stderr, "kvant logits: cannot tokenize the prompt\n");
            free(ids);
            kvant_model_free(m);
            return CLI_FAIL;
        }
    }
    int rc = CLI_FAIL;
    float *logits = NULL;
    kvant_seq *seq = NULL;
    for (int i = 0; i < n; i++)
        if (ids[i] >= in.vocab_size) {
            fprintf(stderr, "kvant logits: token id %d is outside the vocabulary (%d)\n", ids[i], in.vocab_size);
            rc = CLI_USAGE;
            goto done;
        }
    kvant_seq_params sp = kvant_seq_default();
    sp.n_ctx = n;
    sp.attn = attn;
    sp.kv_type = kv_type;
    seq = kvant_seq_new_ex(m, &sp, &st);
    logits = malloc((size_t)n * (size_t)in.vocab_size * sizeof *logits);
    if (!seq || !logits) {
        fprintf(stderr, "kvant logits: %s\n", seq ? "out of memory" : st.msg);
        goto done;
    }
    if (kvant_forward(seq, ids, n, logits, true, &st)) {
        fprintf(stderr, "kvant logits: %s\n", st.msg);
        goto done;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "kvant logits: cannot write %s\n", out_path);
        rc = CLI_USAGE;
        goto done;
    }
    /* x86-64 and arm64 are little-endian: the floats go out as they are */
    const size_t count = (size_t)n * (size_t)in.vocab_size;
    const bool ok = fwrite(logits, sizeof *logits, count, f) == count;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "kvant logits: writing %s failed\n", out_path);
        goto done;
    }
    fprintf(stderr, "kvant logits: %d positions x %d vocabulary -> %s\n", n, in.vocab_size, out_path);
    rc = CLI_OK;
done:
    free(logits);
    kvant_seq_free(seq);
    kvant_model_free(m);
    free(ids);
    return rc;
}
