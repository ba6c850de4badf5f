/* cmd_distill.c - `kvant distill`: knowledge distillation with temperature. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void distill_help(void) {
    printf("usage: kvant distill --teacher MODEL --student CONFIG_OR_MODEL [--tokenizer-from MODEL]\n"
           "                     -f TEXT -o OUT.gguf [--temp T] [--alpha A] [options]\n"
           "\n"
           "Trains the student on loss = A * CE(student, next token)\n"
           "  + (1 - A) * T^2 * KL(softmax(z_teacher / T) || softmax(z_student / T)),\n"
           "with the teacher's logits computed on the fly (FP32 forward of the teacher).\n"
           "The student is a GGUF to start from, or a config (key=value list, see `kvant\n"
           "train --help`) initialized from the seed with the teacher's tokenizer.\n"
           "\n"
           "  --teacher MODEL      teacher GGUF\n"
           "  --student S          GGUF path, or a config such as dim=32,layers=4,heads=4,kv_heads=2\n"
           "  --tokenizer-from M   tokenizer for a config student (default: the teacher's)\n"
           "  --temp T             temperature (default 2)\n"
           "  --alpha A            weight of the hard-label loss in [0, 1] (default 0.5)\n"
           "%s",
           cli_train_common_help);
}

int cmd_distill(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant distill", false};
    kvant_train_params p = kvant_train_default();
    const char *student = NULL;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { distill_help(); return CLI_OK; }
        else if (cli_is(&a, "--teacher", NULL)) p.teacher = cli_str(&a);
        else if (cli_is(&a, "--student", NULL)) student = cli_str(&a);
        else if (cli_is(&a, "--tokenizer-from", NULL)) p.tokenizer_from = cli_str(&a);
        else if (cli_is(&a, "--temp", NULL)) p.temp = cli_float(&a, 0.01f, 100);
        else if (cli_is(&a, "--alpha", NULL)) p.alpha = cli_float(&a, 0, 1);
        else if (!cli_train_flag(&a, &p)) cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!p.teacher || !student) {
        fprintf(stderr, "kvant distill: --teacher and --student are required (see --help)\n");
        return CLI_USAGE;
    }
    if (strchr(student, '=')) {
        p.config = student;
        if (!p.tokenizer_from) p.tokenizer_from = p.teacher;
    } else {
        p.model = student;
    }
    return cli_train_run("kvant distill", &p);
}
