/*
 * fuzz_run_req.c - one JSONL request line of `dsr1 run --in`
 * (dsr1_run_req_parse: our shape and the OpenAI batch shape, messages,
 * tools, sampling fields, stop strings), the id read back from a result
 * record for --resume (dsr1_run_record_id), and the error record written
 * for a refused line. Each input line is parsed on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/run_req.h"
#include "fuzz.h"

static void one_line(const char *line, size_t len, long no)
{
    dsr1_run_defaults d;
    dsr1_run_defaults_init(&d);
    d.system = "You are a test.";
    dsr1_run_req r;
    memset(&r, 0, sizeof r);
    dsr1_error err = {0};
    int rc = dsr1_run_req_parse(&r, line, len, no, &d, &err);
    if (rc && r.id_json) {
        free(dsr1_run_error_json(r.id_json, r.custom_id, no, 0, "invalid_request", err.msg));
        free(dsr1_run_error_json(r.id_json, r.custom_id, no, 1, "invalid_request", err.msg));
    }
    dsr1_run_req_clear(&r);
    free(dsr1_run_record_id(line, len));
    int custom = 0, bad = 0;
    char msg[256];
    free(dsr1_run_line_id(line, len, no, &custom, &bad, msg, sizeof msg));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy without a terminator: reading past len is caught. */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    long no = 1;
    for (size_t a = 0; a <= size; no++) {
        const char *nl = memchr(buf + a, '\n', size - a);
        size_t b = nl ? (size_t)(nl - buf) : size;
        one_line(buf + a, b - a, no);
        a = b + 1;
    }
    free(buf);
    return 0;
}
