/* api/api.h - what the public handles are, for the files of api/ only.
 * Users see them as opaque (include/kvant*.h). */
#ifndef KVANT_API_INTERNAL_H
#define KVANT_API_INTERNAL_H

#include <pthread.h>

#include "kvant.h"
#include "kv/paged.h"
#include "model/model.h"
#include "sample/sample.h"

struct kvant_model {
    model *m;
    /* structured outputs: the vocabulary as the grammar engine reads it,
     * built on the first kvant_grammar_new (under gv_mu) */
    struct grammar_vocab *gv;
    pthread_mutex_t gv_mu;
};

struct kvant_seq {
    const model *m;
    kv_store *kv;
    model_work *work;
    kvant_seq_params params;
};

struct kvant_kv_pool {
    const model *m;
    kv_pool *pool;
    kv_pool *lpool;   /* sliding-window layers' pool, or NULL (model_kv_pools_new) */
    int max_ctx;
};

struct kvant_sampler {
    sampler *s;
    bool sampled;     /* kvant_sampler_sample ran: accepted tokens are generated ones */
};

/* sample/'s settings for a public kvant_sampling.  *bias: a malloc'd copy of
 * its logit bias (NULL when there is none; sample/ and sched/ copy it again,
 * so the caller frees it after the call that takes *out).  false + st:
 * KVANT_ERR_ARG (n_logit_bias < 0, or > 0 with no array), KVANT_ERR_NOMEM. */
bool api_sample_params(const kvant_sampling *p, sample_params *out, sample_bias **bias, kvant_status *st);

/* api/grammar.c: frees the model's grammar vocabulary (kvant_model_free) */
void api_grammar_vocab_free(kvant_model *km);
/* the compiled grammar and vocabulary behind a handle, for the engine */
struct grammar;
const struct grammar *api_grammar_of(const kvant_grammar *g);
const struct grammar_vocab *api_grammar_vocab_of(const kvant_grammar *g);
void api_grammar_ref(kvant_grammar *g);
void api_grammar_release(void *g); /* the engine's reference (a sched release callback) */

/* the kern_type of a public KV cache type; -1 for a value out of range */
int api_kv_type(kvant_kv_type t);

#endif
