/* api/api.h - what the public handles are, for the files of api/ only.
 * Users see them as opaque (include/kvant*.h). */
#ifndef KVANT_API_INTERNAL_H
#define KVANT_API_INTERNAL_H

#include "kvant.h"
#include "kv/paged.h"
#include "model/model.h"
#include "sample/sample.h"

struct kvant_model {
    model *m;
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
};

/* the kern_type of a public KV cache type; -1 for a value out of range */
int api_kv_type(kvant_kv_type t);

#endif
