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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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
static bool g_bf16; /* AVX512_BF16, and the avx512 tier runs */
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

/* What the OS has enabled, not only what CPUID lists: XCR0 (read with
 * xgetbv once CPUID.1:ECX says OSXSAVE) must have the SSE and AVX state
 * bits (1, 2) for any 256-bit register and also the opmask, ZMM_Hi256 and
 * Hi16_ZMM bits (5, 6, 7) for AVX-512.  A hypervisor can list an ISA in
 * CPUID while leaving its state disabled; its instructions then trap.
 * AMX (tiles, bits 17-18) is never used by kvant: on Linux it also needs
 * arch_prctl(ARCH_REQ_XCOMP_PERM), and kern_cpu_report says whether both
 * would allow it, so a report shows why a listed AMX is not usable. */
#if KERN_X86
static uint64_t xcr0(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* no OSXSAVE: no xgetbv */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#define XCR0_AVX 0x6u     /* SSE | AVX (YMM upper halves) */
#define XCR0_AVX512 0xe0u /* opmask | ZMM_Hi256 | Hi16_ZMM */
#define XCR0_AMX 0x60000u /* XTILECFG | XTILEDATA */
#endif

/* The best tier this CPU runs and whether it has AVX512_BF16: a tier is
 * chosen only when CPUID lists its instructions AND XCR0 says the OS saves
 * its registers (__builtin_cpu_supports checks XCR0 in recent libgcc only,
 * so it is checked here directly). */
static kern_tier detect(bool *has_bf16) {
    *has_bf16 = false;
#if KERN_X86
    __builtin_cpu_init();
    const uint64_t x = xcr0();
    const bool avx2 = (x & XCR0_AVX) == XCR0_AVX && __builtin_cpu_supports("avx2") &&
                      __builtin_cpu_supports("fma") && cpu_has_f16c();
    if (!avx2) return KERN_TIER_SCALAR;
    const bool avx512 = (x & XCR0_AVX512) == XCR0_AVX512 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    if (!avx512) return KERN_TIER_AVX2;
    *has_bf16 = __builtin_cpu_supports("avx512bf16");
    return KERN_TIER_AVX512;
#else
    return KERN_TIER_SCALAR;
#endif
}

#if KERN_X86
/* whether Linux lets a process use the AMX tile data state: the kernel
 * supports it (ARCH_GET_XCOMP_SUPP, 0x1021, lists XTILEDATA = bit 18);
 * a process would still have to ask with ARCH_REQ_XCOMP_PERM first */
static bool os_allows_amx(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    uint64_t supp = 0;
    return syscall(SYS_arch_prctl, 0x1021, &supp) == 0 && (supp & (1ull << 18));
#else
    return false;
#endif
}
#endif

/* AMD's family with AVX-512 (0x19: Zen 4, Zen 3 has none; 0x1A: Zen 5),
 * else 0 */
static unsigned amd_avx512_family(void) {
#if KERN_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u)
        return 0; /* not "AuthenticAMD" */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned family = ((a >> 8) & 0xf) + ((a >> 20) & 0xff);
    return __builtin_cpu_supports("avx512f") ? family : 0;
#else
    return 0;
#endif
}
/* once (CPUID traps to the hypervisor on these machines; this is asked per matmul) */
static unsigned g_amd512;
static pthread_once_t g_amd_once = PTHREAD_ONCE_INIT;
static void amd_init(void) { g_amd512 = amd_avx512_family(); }
static unsigned amd512(void) {
    pthread_once(&g_amd_once, amd_init);
    return g_amd512;
}
bool kern_zmm_halved(void) { return amd512() == 0x19; }
bool kern_prefetch_l2_amd512(void) { return amd512() == 0x19 || amd512() == 0x1A; }
bool kern_prefetch_l2(void) { return kern_zmm_halved(); /* the one CPU each was measured on: Zen 4 */ }

static char g_report[320];

/* one line: what CPUID lists, what XCR0 enables, the tier chosen */
static void report_fill(void) {
    bool bf16;
    const kern_tier best = detect(&bf16);
#if KERN_X86
    const uint64_t x = xcr0();
    unsigned a, b, c, d;
    const bool amx_listed = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24));
    const char *amx = !amx_listed ? "-"
                      : (x & XCR0_AMX) != XCR0_AMX ? "off (unused)"
                      : os_allows_amx() ? "on (unused)"
                                        : "no OS permission (unused)";
    snprintf(g_report, sizeof g_report,
             "cpuid: avx2 %s, avx512f %s, avx512vnni %s, avx512bf16 %s, amx %s; xcr0 0x%llx: "
             "avx %s, avx512 %s, amx %s; best tier %s%s",
             __builtin_cpu_supports("avx2") ? "yes" : "no", __builtin_cpu_supports("avx512f") ? "yes" : "no",
             __builtin_cpu_supports("avx512vnni") ? "yes" : "no", bf16 ? "yes" : "no", amx_listed ? "listed" : "no",
             (unsigned long long)x, (x & XCR0_AVX) == XCR0_AVX ? "on" : "off",
             (x & XCR0_AVX512) == XCR0_AVX512 ? "on" : "off", amx, kern_tier_name(best),
             best >= KERN_TIER_AVX512 && kern_zmm_halved()
                 ? " (512-bit ops in two halves: F16 prefill, Q4_K decode and attention scores on AVX2 forms; decode prefetches into L2)"
             : best >= KERN_TIER_AVX512 && kern_prefetch_l2_amd512() ? " (prefill attention tiles and S24_F16 prefetch into L2)"
                                                                    : "");
#else
    snprintf(g_report, sizeof g_report, "not x86-64; best tier %s", kern_tier_name(best));
#endif
}

const char *kern_cpu_report(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, report_fill);
    return g_report;
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
    g_bf16 = has_bf16;
    for (int tier = KERN_TIER_SCALAR; tier <= (int)g_best; tier++) {
        memcpy(g_ops[tier], g_ops[tier - 1], sizeof g_ops[tier]);
        if (tier == KERN_TIER_SCALAR) kern_tier_scalar_install(g_ops[tier]);
#if KERN_X86
        if (tier == KERN_TIER_AVX2) kern_tier_avx2_install(g_ops[tier]);
        if (tier == KERN_TIER_AVX2) kern_ptq_avx2_install(g_ops[tier]);
        if (tier == KERN_TIER_AVX512) kern_tier_avx512_install(g_ops[tier], has_bf16);
        if (tier == KERN_TIER_AVX512) kern_sparse24_avx512_install(&g_ops[tier][KT_S24_F16], &g_ops[tier][KT_S24_Q8]);
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
bool kern_has_avx512_bf16(void) { ready(); return g_bf16; }
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
