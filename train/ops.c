/* ops.c - the generic ops and model (train/tmpl.h) instantiated for float
 * (fast matmuls) and double (plain loops, for the gradient checks). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/train.h"

#define R float
#define S f
#define TRAIN_FAST 1
#define REXP(x) expf(x)
#include "train/tmpl.h"
#undef R
#undef S
#undef TRAIN_FAST
#undef REXP

#define R double
#define S d
#define TRAIN_FAST 0
#define REXP(x) exp(x)
#include "train/tmpl.h"
#undef R
#undef S
#undef TRAIN_FAST
#undef REXP
