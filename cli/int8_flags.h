/* int8_flags.h - the INT8 flags shared by kvant ppl, run, bench and
 * outliers (LLM.int8, SmoothQuant W8A8, synthetic outliers). */
#ifndef KVANT_CLI_INT8_FLAGS_H
#define KVANT_CLI_INT8_FLAGS_H

#include "cli/cli.h"

typedef struct {
    kvant_int8_params p;
    bool mixed, w8a8, smooth, any;
    bool mode_set;             /* --int8-mode given: mode below */
    kvant_int8_mode mode;
    const char *calib_path;
    long calib_skip;
    char *calib_buf;
    int inject[256];
} cli_int8;

void cli_int8_init(cli_int8 *o);
/* consumes argv[a->i] (and its value) when it is an INT8 flag */
bool cli_int8_flag(cli_args *a, cli_int8 *o);
/* help lines for the flags */
void cli_int8_help(void);
/* *out = NULL when no INT8 flag was given; returns a CLI exit code
 * (CLI_OK on success), having printed the error */
int cli_int8_build(cli_int8 *o, kvant_model *m, const char *cmd, kvant_int8 **out);
/* one line describing the setup (stderr) */
void cli_int8_describe(const cli_int8 *o, const kvant_int8 *q, const char *cmd);
void cli_int8_free(cli_int8 *o);

#endif
