/*
 * test_chat_view.c - chat's in-place "thinking:" line on a pseudo-terminal
 * (cli/chat_io.c): drawn at one width, the window narrowed, then erased.
 * The erase must go up every row the terminal's reflow made of the line.
 * With wide (CJK) characters a reflowing terminal wraps a character that
 * does not fit at a row's end onto the next row, so an odd-aligned line of
 * 99 columns narrowed to 33 takes four rows, not the three its width
 * alone suggests (e2e/chat_progress.sh once left a row behind this way).
 */
#include <fcntl.h>
#include <locale.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/chat_io.h"
#include "test.h"

static void set_cols(int fd, int cols)
{
    struct winsize ws = {.ws_row = 40, .ws_col = (unsigned short)cols};
    (void)ioctl(fd, TIOCSWINSZ, &ws);
}

/* The "ESC [ N A" (cursor up N rows) the view wrote last, or 0. */
static int last_up(const char *s)
{
    int up = 0;
    for (const char *p = strstr(s, "\033["); p; p = strstr(p + 1, "\033[")) {
        char *e;
        long n = strtol(p + 2, &e, 10);
        if (e > p + 2 && *e == 'A') up = (int)n;
    }
    return up;
}

static int narrowed_up(dsr1_test_ctx *t, const char *reasoning, int from, int to, char *seen,
                       size_t cap)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m)) {
        dsr1_test_skip(t, "no pseudo-terminal here");
        return -1;
    }
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    if (s < 0) {
        CHECK(s >= 0);
        close(m);
        return -1;
    }
    set_cols(s, from);
    FILE *f = fdopen(s, "w");
    dsr1_gen gen;
    memset(&gen, 0, sizeof gen);
    dsr1_chat_view v;
    memset(&v, 0, sizeof v);
    v.out = v.rout = f;
    v.tty = 1;
    v.mode = DSR1_THINK_COLLAPSE;
    dsr1_chat_view_begin(&v, &gen, 1);
    dsr1_chat_view_piece(&v, DSR1_GEN_REASONING, reasoning, strlen(reasoning));
    set_cols(s, to);
    dsr1_chat_view_end(&v, NULL);
    fflush(f);
    fclose(f);
    /* A pty hands the slave's writes to the master through a kernel work
     * queue, so one read right after the write can return part of them
     * (CI once saw no erase at all). Read until the closed slave's end
     * (EIO) or a quiet second. */
    size_t got = 0;
    struct pollfd pf = {.fd = m, .events = POLLIN};
    while (got < cap - 1 && poll(&pf, 1, 1000) > 0) {
        ssize_t n = read(m, seen + got, cap - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    seen[got] = 0;
    close(m);
    return last_up(seen);
}

DSR1_TEST(chat_view_collapse_narrowed_wide_chars)
{
    char *old = strdup(setlocale(LC_CTYPE, NULL));
    if (!setlocale(LC_CTYPE, "C.UTF-8")) {
        free(old);
        DSR1_SKIP("no C.UTF-8 locale");
    }
    /* "thinking: " (10 columns) + "x" + 44 CJK characters of 2 = 99 */
    char text[256] = "x", seen[8192];
    for (int i = 0; i < 44; i++) strcat(text, "\xe7\xb4\xa2"); /* U+7D22 */
    /* 33 columns: 11 + 11 x 2 = 33 | 16 x 2 = 32, one left | 16 | 1: four rows */
    int up = narrowed_up(t, text, 100, 33, seen, sizeof seen);
    CHECKF(up == 3, "narrowed to 33 columns: went up %d rows, want 3", up);
    /* ASCII alone: 99 columns at 33 are three rows */
    memset(text, 'a', 89);
    text[89] = 0;
    up = narrowed_up(t, text, 100, 33, seen, sizeof seen);
    CHECKF(up == 2, "ASCII narrowed to 33 columns: went up %d rows, want 2", up);
    setlocale(LC_CTYPE, old);
    free(old);
}
