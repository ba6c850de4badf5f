/* dispatch.c - chooses each type's operations for the CPU at run time.
 *
 * Tiers, lowest first (kern_tier in kernels/types.h):
 *   ref     the _ref rows of the type table: the spec, plain C
 *   scalar  portable C, faster (kernels/vec_dot_scalar.c)
 *   avx2    AVX2 + FMA + F16C (kernels/vec_dot_avx2.c)
 *   avx512  AVX-512 F/BW/VL/DQ + VNNI, and BF16 where the CPU has it
 *           (kernels/vec_dot_avx512.c)
 * Each tier's table starts as a copy of the tier below and is then
 * overwritten where the tier has its own version (kernels/tiers.h), so a
 * member a tier lacks falls back to the next lower tier.
 *
 * The tables are built once, thread-safely (pthread_once), on the first
 * call of any function here.  The active tier starts as the best one the
 * CPU (and the OS, which must save the wider registers) supports, unless
 * the environment variable KVANT_TIER=ref|scalar|avx2|avx512 names a lower
 * one: then that one (a tier the CPU lacks is refused with a warning and
 * the best is used).  kern_set_tier changes it later (tests, benchmarks);
 * the active tier is read with an atomic load, so a change is seen by
 * every thread, but callers should not change it while a matmul runs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/tiers.h"
#include "kernels/ptq.h"
#include "kernels/sparse24.h"

#if defined(__x86_64__) || defined(_M_X64)
#define KERN_X86 1
#else
#define KERN_X86 0
#endif

static kern_type_ops g_ops[KERN_TIER_COUNT][KT_KVANT_END]; /* indexed by type number */
static kern_tier g_best = KERN_TIER_SCALAR;
static atomic_int g_active = KERN_TIER_SCALAR;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if KERN_X86
#include <cpuid.h>
/* F16C (CPUID.1:ECX bit 29); not every compiler's __builtin_cpu_supports knows the name */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

/* The best tier this CPU runs and whether it has AVX512_BF16.
 * __builtin_cpu_supports also checks (XGETBV) that the OS saves the
 * YMM / ZMM state, so a tier is only chosen when its registers work. */
static kern_tier detect(bool *has_bf16) {
    *has_bf16 = false;
#if KERN_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    if (!avx2) return KERN_TIER_SCALAR;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    if (!avx512) return KERN_TIER_AVX2;
    *has_bf16 = __builtin_cpu_supports("avx512bf16");
    return KERN_TIER_AVX512;
#else
    return KERN_TIER_SCALAR;
#endif
}

/* KVANT_TIER's tier, or -1 when it is unset or names no tier */
static int env_tier(void) {
    const char *v = getenv("KVANT_TIER");
    if (!v || !*v) return -1;
    for (int t = 0; t < KERN_TIER_COUNT; t++)
        if (!strcmp(v, kern_tier_name((kern_tier)t))) return t;
    core_log(KVANT_LOG_WARN, "KVANT_TIER=%s is not one of ref, scalar, avx2, avx512; ignored", v);
    return -1;
}

static void init(void) {
    for (int t = 0; t < KT_KVANT_END; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        if (tt) /* gemm: NULL (call vec_dot per pair) */
            g_ops[KERN_TIER_REF][t] = (kern_type_ops){.to_float = tt->to_float, .from_float = tt->from_float_ref,
                                                      .vec_dot = tt->vec_dot_ref};
    }
    bool has_bf16;
    g_best = detect(&has_bf16);
    for (int tier = KERN_TIER_SCALAR; tier <= (int)g_best; tier++) {
        memcpy(g_ops[tier], g_ops[tier - 1], sizeof g_ops[tier]);
        if (tier == KERN_TIER_SCALAR) kern_tier_scalar_install(g_ops[tier]);
#if KERN_X86
        if (tier == KERN_TIER_AVX2) kern_tier_avx2_install(g_ops[tier]);
        if (tier == KERN_TIER_AVX2) kern_ptq_avx2_install(g_ops[tier]);
        if (tier == KERN_TIER_AVX512) kern_tier_avx512_install(g_ops[tier], has_bf16);
        if (tier == KERN_TIER_AVX2)
            kern_sparse24_avx2_install(&g_ops[tier][KT_S24_F16], &g_ops[tier][KT_S24_Q8],
                                       &g_ops[tier][KT_S24_A8]);
#endif
    }
    int active = env_tier();
    if (active > (int)g_best) {
        core_log(KVANT_LOG_WARN, "KVANT_TIER=%s: this CPU lacks it; using %s", kern_tier_name((kern_tier)active),
                 kern_tier_name(g_best));
        active = -1;
    }
    atomic_store(&g_active, active < 0 ? (int)g_best : active);
}

static void ready(void) { pthread_once(&g_once, init); }

kern_tier kern_best_tier(void) { ready(); return g_best; }
kern_tier kern_active_tier(void) { ready(); return (kern_tier)atomic_load_explicit(&g_active, memory_order_relaxed); }

const kern_type_ops *kern_ops_tier(int t, kern_tier tier) {
    ready();
    if (t < 0 || t >= KT_KVANT_END || !kern_type_get(t)) return 0;
    if ((int)tier < 0 || tier > g_best) return 0;
    return &g_ops[tier][t];
}

const kern_type_ops *kern_ops(int t) { return kern_ops_tier(t, kern_active_tier()); }

bool kern_set_tier(kern_tier tier) {
    ready();
    if ((int)tier < 0 || tier > g_best) return false;
    atomic_store(&g_active, (int)tier);
    return true;
}

const char *kern_tier_name(kern_tier tier) {
    static const char *names[] = {"ref", "scalar", "avx2", "avx512"};
    return (int)tier >= 0 && tier < KERN_TIER_COUNT ? names[tier] : "unknown";
}
