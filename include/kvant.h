/* kvant.h - the public C API of kvant, all of it.
 *
 * Split by topic; include only the part a program needs:
 *   kvant_base.h      status, logging, version, clock, threads
 *   kvant_infer.h     models, tokenizers, sequences, sampling, the engine,
 *                     perplexity, chat templates, vocabularies
 *   kvant_compress.h  quantization, PTQ, pruning, INT8 inference, outliers,
 *                     synthetic models
 *   kvant_train.h     training, distillation, QAT
 * Handles are opaque, names carry the kvant_ prefix. */
#ifndef KVANT_H
#define KVANT_H

#include "kvant_base.h"
#include "kvant_infer.h"
#include "kvant_compress.h"
#include "kvant_train.h"

#endif
