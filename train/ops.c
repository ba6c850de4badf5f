/* ops.c - the generic ops and model (train/tmpl.h) instantiated for float
 * (fast matmuls) and double (plain loops, for the gradient checks). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/train.h"

#define R float
#define S f
#define TRAIN_FAST 1
#include "train/tmpl.h"
#undef R
#undef S
#undef TRAIN_FAST

#define R double
#define S d
#define TRAIN_FAST 0
#include "train/tmpl.h"
#undef R
#undef S
#undef TRAIN_FAST
