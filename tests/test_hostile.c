/*
 * test_hostile.c - what a crafted file can make dsr1 print: every error
 * message and every string shown from a file goes through
 * dsr1_text_sanitize (issue 13 item 15). The end-to-end cases (FIFOs,
 * convert onto its own sources, escape codes through `dsr1 info`) are in
 * tests/e2e/hostile_files.sh.
 */
#include <string.h>

#include "core/error.h"
#include "test.h"

DSR1_TEST(text_sanitize_controls)
{
    char s[64];
    /* ESC [ 2 J, BEL, newline, DEL, C1 CSI (U+009B as UTF-8), a lone
     * continuation byte, a truncated sequence; é and 中 are kept. */
    strcpy(s, "a\033[2Jb\a\nc\x7f" "d\xc2\x9b" "e\x80" "f\xe4\xb8" "\xc3\xa9\xe4\xb8\xad");
    size_t n = dsr1_text_sanitize(s);
    CHECK_STR(s, "a?[2Jb??c?d?e?f??\xc3\xa9\xe4\xb8\xad");
    CHECK_EQ_INT(n, strlen(s));
    strcpy(s, "");
    CHECK_EQ_INT(dsr1_text_sanitize(s), 0);
}

DSR1_TEST(errorf_sanitizes_quoted_input)
{
    dsr1_error err = {0};
    dsr1_errorf(&err, DSR1_EFORMAT, "%s: key \"%s\"", "f.json", "x\033]0;title\ay\nz");
    CHECK_STR(err.msg, "f.json: key \"x?]0;title?y?z\"");
    dsr1_error_wrap(&err, "%s", "w\033");
    CHECK_STR(err.msg, "w?: f.json: key \"x?]0;title?y?z\"");
}
