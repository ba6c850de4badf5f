/* cli/ - the kvant command line.  Only this folder may exit the process;
 * it uses nothing but the public API (include/kvant*.h).
 * Exit codes: 0 success, 1 the work failed (bad model file, ...),
 * 2 usage errors (bad flag, missing file). */
#ifndef KVANT_CLI_H
#define KVANT_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "kvant.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* argument cursor over argv[first..argc) */
typedef struct {
    int argc, i;
    char **argv;
    const char *cmd;  /* for messages: "kvant run" */
    bool error;       /* set once a message was printed */
} cli_args;

/* true if argv[i] equals one of the names (e.g. "-n", "--n-predict") */
bool cli_is(cli_args *a, const char *name1, const char *name2);
/* the value after the flag at argv[i] (advances); prints + sets error if missing */
const char *cli_str(cli_args *a);
int cli_int(cli_args *a, long lo, long hi);
float cli_float(cli_args *a, float lo, float hi);
uint64_t cli_u64(cli_args *a);
/* prints "kvant run: bad value 'v' for --flag: why" and sets error */
void cli_bad_value(cli_args *a, const char *flag, const char *v, const char *why);
/* prints "kvant run: unknown option 'x' (see --help)" and sets error */
void cli_unknown(cli_args *a);
/* The whole file, NUL-terminated (malloc'd; *len = its bytes), or NULL
 * when it cannot be opened or read. */
char *cli_read_file(const char *path, size_t *len);
/* --chat-template-file (run, serve): the name of the template a Jinja file
 * holds, found by its markers; NULL after a message when kvant knows none */
const char *cli_chat_template_file(const char *cmd, const char *path);
/* --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n --seed
 * (run, chat): consumes argv[a->i] when it is one; their help lines */
bool cli_sampling_flag(cli_args *a, kvant_sampling *s, bool *seed_set);
extern const char *const cli_sampling_help;
/* says on stderr that cmd runs the built-in default model (no -m given;
 * kvant_model_open(NULL, ...) opens it) */
void cli_note_builtin_model(const char *cmd);
/* ---- the names of the library's enums (cli/choices.c) ---- */
typedef struct {
    const char *name;
    int value;
} cli_choice;  /* tables end with {NULL, 0}; the first entry is the default */
extern const cli_choice cli_kv_types[], cli_attns[], cli_caches[], cli_stream_policies[], cli_int8_modes[],
    cli_ptq_schemes[], cli_ptq_clips[], cli_ptq_fallbacks[], cli_prune_methods[], cli_prune_targets[],
    cli_prune_formats[];
/* name -> value (case-insensitive); false when the table has no such name */
bool cli_choice_of(const cli_choice *tab, const char *name, int *out);
/* the value after the flag at argv[i], by name; a bad one prints
 * "bad value 'x' for --flag: one of a, b, c" and sets the error */
int cli_choice_arg(cli_args *a, const cli_choice *tab);
/* value -> its first name ("?" when none) */
const char *cli_choice_name(const cli_choice *tab, int value);
/* a file type by name ("Q4_K_M", case-insensitive); its list for messages */
bool cli_ftype_of(const char *name, kvant_ftype *out);
void cli_ftype_names(char *buf, size_t cap);
/* PTQ granularity: "tensor", "channel", "group:G" or "gG" */
bool cli_granularity_of(const char *s, kvant_ptq_granularity *g, int *group);
/* pruning pattern: "unstructured" or "N:M" (1 <= N < M <= 64) */
bool cli_pattern_of(const char *s, int *keep, int *group);

/* exit code for a failed library call: 2 for unreadable files, else 1 */
int cli_status_exit(const kvant_status *st);

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
/* one timed pp / tg run of kvant bench (cli/cmd_bench.c), also kvant cliff's */
double cli_bench_run(kvant_seq *seq, const int32_t *toks, int n, bool gen, float *logits, const char *cmd);
/* the same run from whatever the cache holds now (kvant bench -d) */
double cli_bench_time(kvant_seq *seq, const int32_t *toks, int n, bool gen, float *logits, const char *cmd);
/* the median of v[0..n), n >= 1; v is left sorted (kvant bench --vs, kvant cliff) */
double cli_median(double *v, int n);
int cmd_bench(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_stream_ppl(int argc, char **argv);
int cmd_attn_stats(int argc, char **argv);
int cmd_outliers(int argc, char **argv);
int cmd_bench_int8(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_loadgen(int argc, char **argv);
int cmd_bench_batch(int argc, char **argv);
/* training (cli/cmd_train.c, cmd_distill.c, cmd_qat.c) */
int cmd_train(int argc, char **argv);
int cmd_distill(int argc, char **argv);
int cmd_qat(int argc, char **argv);
extern const char *const cli_train_common_help;
bool cli_train_flag(cli_args *a, kvant_train_params *p);
int cli_train_run(const char *cmd, kvant_train_params *p);

/* PTQ form of `kvant quantize` (cli/cmd_ptq.c) */
bool cli_ptq_wanted(int argc, char **argv);
void cli_ptq_help(void);
int cmd_ptq_quantize(int argc, char **argv);
/* W8A8 form of `kvant quantize` (cli/cmd_quantize_int8.c) */
bool cli_int8_quantize_wanted(int argc, char **argv);
void cli_int8_quantize_help(void);
int cmd_int8_quantize(int argc, char **argv);
int cmd_cliff(int argc, char **argv);
int cmd_prune(int argc, char **argv);

#endif
