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
    fuzz_lines(data, size, one_line);
    return 0;
}
