/* ui.h - the chat page GET / serves (server/ui/index.html, in the binary),
 * internal to server/. */
#ifndef KVANT_SERVER_UI_H
#define KVANT_SERVER_UI_H

#include <stddef.h>

/* the page's bytes (HTML with its CSS and JavaScript inline; not
 * NUL-terminated), read-only, for the life of the process */
const char *srv_ui_page(size_t *len);
/* a strong ETag for the page ("\"kvant-<16 hex digits>\"", FNV-1a 64 of
 * its bytes) into out[32] */
void srv_ui_etag(char out[32]);

#endif
