/* kvant_base.h - what every part of kvant's public C API shares: the status
 * a failing call fills, logging, the version, the clock and the thread count.
 *
 * Errors: functions that can fail take a kvant_status* and return NULL or a
 * non-zero kvant_code; st->msg then holds one line a user can read.  The
 * library never exits the process.  Choices are enums (KVANT_...), whose
 * zero value is the one default; names ("f16", "wanda") are parsed by the
 * front ends (cli/choices.c), not here. */
#ifndef KVANT_PUBLIC_BASE_H
#define KVANT_PUBLIC_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ---------------------------------------------------------- */
typedef enum {
    KVANT_OK = 0,
    KVANT_ERR_IO,          /* cannot open / read / map a file            */
    KVANT_ERR_FORMAT,      /* malformed or truncated file                */
    KVANT_ERR_UNSUPPORTED, /* valid file, feature kvant does not support */
    KVANT_ERR_NOMEM,       /* allocation failed or a size would overflow */
    KVANT_ERR_ARG,         /* bad argument from the caller               */
    KVANT_ERR_FULL,        /* out of KV cache / context                  */
} kvant_code;

typedef struct {
    kvant_code code;
    char msg[512];
} kvant_status;

/* ---- logging ---------------------------------------------------------- */
typedef enum { KVANT_LOG_ERROR, KVANT_LOG_WARN, KVANT_LOG_INFO, KVANT_LOG_DEBUG } kvant_log_level;
typedef void (*kvant_log_fn)(kvant_log_level level, const char *line, void *user);
/* Redirects every log line of the library (default: stderr, INFO and up). */
void kvant_set_log(kvant_log_fn fn, void *user, kvant_log_level max_level);

/* ---- misc --------------------------------------------------------------- */
const char *kvant_version(void);
double kvant_time_ms(void); /* monotonic clock, milliseconds */
int kvant_default_threads(void);
/* the kernel tier in use: "ref", "scalar", "avx2", "avx512" */
const char *kvant_kernel_tier(void);
/* one line: the CPU's listed and OS-enabled vector state (CPUID, XCR0,
 * AMX permission) and the best kernel tier; the tier follows XCR0 */
const char *kvant_cpu_report(void);

#ifdef __cplusplus
}
#endif
#endif
