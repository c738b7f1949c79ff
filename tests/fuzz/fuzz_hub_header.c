/*
 * fuzz_hub_header.c - response header lines of the Hub and its CDN as
 * `dsr1 pull` reads them (dsr1_hub_header_line: status line, Retry-After,
 * Content-Range, X-Error-Code). The input is split into lines, each handed
 * over as libcurl does (its bytes only, not NUL-terminated, in an
 * exact-size buffer so ASan sees any read past it); the whole input is
 * handed over as one line too. The error code must stay a short string.
 */
#include <stdlib.h>
#include <string.h>

#include "convert/hub.h"
#include "fuzz.h"

static void feed(dsr1_hub_resp *r, const uint8_t *h, size_t len)
{
    char *line = malloc(len ? len : 1);
    if (!line) return;
    memcpy(line, h, len);
    dsr1_hub_header_line(r, line, len);
    free(line);
    if (strnlen(r->error_code, sizeof r->error_code) >= sizeof r->error_code) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsr1_hub_resp r;
    memset(&r, 0, sizeof r);
    for (size_t a = 0; a < size;) {
        const uint8_t *nl = memchr(data + a, '\n', size - a);
        size_t e = nl ? (size_t)(nl - data) + 1 : size;
        feed(&r, data + a, e - a);
        a = e;
    }
    feed(&r, data, size);
    return 0;
}
