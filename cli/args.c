/* args.c - flag parsing helpers with range checks and clear messages. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

bool cli_is(cli_args *a, const char *n1, const char *n2) {
    const char *s = a->argv[a->i];
    return (n1 && !strcmp(s, n1)) || (n2 && !strcmp(s, n2));
}

const char *cli_str(cli_args *a) {
    const char *flag = a->argv[a->i];
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "%s: option '%s' needs a value (see --help)\n", a->cmd, flag);
        a->error = true;
        return NULL;
    }
    return a->argv[++a->i];
}

void cli_bad_value(cli_args *a, const char *flag, const char *v, const char *why) {
    fprintf(stderr, "%s: bad value '%s' for %s: %s\n", a->cmd, v, flag, why);
    a->error = true;
}

int cli_int(cli_args *a, long lo, long hi) {
    const char *flag = a->argv[a->i], *v = cli_str(a);
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end) { cli_bad_value(a, flag, v, "expected an integer"); return 0; }
    if (x < lo || x > hi) {
        char why[96];
        snprintf(why, sizeof why, "must be in [%ld, %ld]", lo, hi);
        cli_bad_value(a, flag, v, why);
        return 0;
    }
    return (int)x;
}

float cli_float(cli_args *a, float lo, float hi) {
    const char *flag = a->argv[a->i], *v = cli_str(a);
    if (!v) return 0;
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || x != x) { cli_bad_value(a, flag, v, "expected a number"); return 0; }
    if (x < lo || x > hi) {
        char why[96];
        snprintf(why, sizeof why, "must be in [%g, %g]", lo, hi);
        cli_bad_value(a, flag, v, why);
        return 0;
    }
    return x;
}

uint64_t cli_u64(cli_args *a) {
    const char *flag = a->argv[a->i], *v = cli_str(a);
    if (!v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') { cli_bad_value(a, flag, v, "expected a non-negative integer"); return 0; }
    return x;
}

void cli_unknown(cli_args *a) {
    fprintf(stderr, "%s: unknown option '%s' (see --help)\n", a->cmd, a->argv[a->i]);
    a->error = true;
}

int cli_status_exit(const kvant_status *st) { return st->code == KVANT_ERR_IO ? CLI_USAGE : CLI_FAIL; }

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* --chat-template-file: the template a Jinja file holds, by its markers (as
 * for a model's tokenizer.chat_template); NULL after a message when kvant
 * knows none in it */
const char *cli_chat_template_file(const char *cmd, const char *path) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "%s: cannot read --chat-template-file '%s'\n", cmd, path);
        return NULL;
    }
    const kvant_chat_template t = kvant_chat_detect_text(text);
    free(text);
    if (t == KVANT_CHAT_PLAIN) {
        fprintf(stderr, "%s: %s: not a chat template kvant knows (known: %s; --chat-template NAME picks one)\n", cmd,
                path, kvant_chat_template_list());
        return NULL;
    }
    return kvant_chat_template_name(t);
}

const char *const cli_sampling_help =
    "      --temp T           temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K          keep the K most likely tokens; 0 = off (default 40)\n"
    "      --top-p P          nucleus sampling; 1 = off (default 0.95)\n"
    "      --min-p P          drop tokens below P x the top probability; 0 = off (default 0.05)\n"
    "      --repeat-penalty R penalize the last --repeat-last-n tokens; 1 = off (default 1)\n"
    "      --repeat-last-n N  window of the penalty (default 64)\n"
    "  -s, --seed S           RNG seed (default: from the clock; printed in the stats)\n";

bool cli_sampling_flag(cli_args *a, kvant_sampling *s, bool *seed_set) {
    if (cli_is(a, "--temp", "--temperature")) s->temperature = cli_float(a, 0, 100);
    else if (cli_is(a, "--top-k", NULL)) s->top_k = cli_int(a, 0, 1 << 24);
    else if (cli_is(a, "--top-p", NULL)) s->top_p = cli_float(a, 1e-6f, 1);
    else if (cli_is(a, "--min-p", NULL)) s->min_p = cli_float(a, 0, 1);
    else if (cli_is(a, "--repeat-penalty", NULL)) s->repeat_penalty = cli_float(a, 1e-3f, 100);
    else if (cli_is(a, "--repeat-last-n", NULL)) s->repeat_last_n = cli_int(a, 0, 1 << 20);
    else if (cli_is(a, "-s", "--seed")) s->seed = cli_u64(a), *seed_set = true;
    else return false;
    return true;
}

void cli_note_builtin_model(const char *cmd) {
    fprintf(stderr, "%s: no -m MODEL given: using the built-in stories260K (260K parameters, TinyStories, MIT)\n", cmd);
}
