/* ui.c - the chat page, in the binary: server/ui/index.html (one file: HTML,
 * <style>, <script>; no framework, nothing from the network) is assembled in
 * with .incbin, as model/builtin.c does for the default model.  CMake passes
 * the file's absolute path as KVANT_UI_HTML and makes this object depend on
 * it, so editing the page rebuilds the server. */
#include <stdint.h>
#include <stdio.h>

#include "server/ui.h"

#ifndef KVANT_UI_HTML
#error "KVANT_UI_HTML must name server/ui/index.html (set by CMakeLists.txt)"
#endif

__asm__(".section .rodata\n"
        "kvant_ui_html_start:\n"
        ".incbin \"" KVANT_UI_HTML "\"\n"
        "kvant_ui_html_end:\n"
        ".previous\n");
extern const char kvant_ui_html_start[], kvant_ui_html_end[];

const char *srv_ui_page(size_t *len) {
    *len = (size_t)(kvant_ui_html_end - kvant_ui_html_start);
    return kvant_ui_html_start;
}

void srv_ui_etag(char out[32]) {
    size_t n;
    const unsigned char *p = (const unsigned char *)srv_ui_page(&n);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    snprintf(out, 32, "\"kvant-%016llx\"", (unsigned long long)h);
}
