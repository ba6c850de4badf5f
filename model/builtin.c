/* builtin.c - the default model, in the binary: stories260K (a 260K-parameter
 * llama trained on TinyStories by Andrej Karpathy, MIT licence, see
 * models/LICENSE.stories260K), so `kvant run` works from any clone and any
 * install without a model file beside it.  The GGUF's bytes are assembled in
 * with .incbin (CMake passes the file's absolute path as KVANT_BUILTIN_GGUF);
 * the model opens from memory (gguf_open_mem), read-only like a mapping. */
#include "model/model.h"

#ifndef KVANT_BUILTIN_GGUF
#error "KVANT_BUILTIN_GGUF must name models/stories260K.gguf (set by CMakeLists.txt)"
#endif

__asm__(".section .rodata\n"
        ".balign 64\n"
        "kvant_builtin_gguf_start:\n"
        ".incbin \"" KVANT_BUILTIN_GGUF "\"\n"
        "kvant_builtin_gguf_end:\n"
        ".previous\n");
extern const uint8_t kvant_builtin_gguf_start[], kvant_builtin_gguf_end[];

const uint8_t *model_builtin_gguf(size_t *size) {
    *size = (size_t)(kvant_builtin_gguf_end - kvant_builtin_gguf_start);
    return kvant_builtin_gguf_start;
}
