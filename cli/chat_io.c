/*
 * chat_io.c - terminal input and streamed display for `dsr1 chat` (see
 * chat_io.h).
 *
 * Input goes through libedit's native API with our own character reader
 * (EL_GETCFN) because two things need to see raw bytes first:
 *  - bracketed paste: the terminal wraps a paste in ESC[200~ ... ESC[201~;
 *    inside it a newline must not submit the line, so we hand libedit
 *    ^V (quoted insert) followed by the newline, which it inserts
 *    literally;
 *  - Ctrl-C: SIGINT interrupts our read() (the handler is installed without
 *    SA_RESTART), we return -1, el_gets returns NULL and the caller sees
 *    the flag. libedit's own signal handling (EL_SIGNAL) is left off: it
 *    re-raises signals to the whole process group.
 *
 * Display: reasoning arrives before the answer. SHOW streams it dimmed
 * under a "thinking" header; HIDE keeps one in-place counter line; COLLAPSE
 * keeps one in-place line with the latest reasoning text, as much as fits
 * the terminal's width (measured at every draw, redrawn on SIGWINCH). All
 * three end it with one summary line (tokens, seconds) and then stream the
 * answer. Before any of it, a long prompt shows an in-place progress line
 * (tokens of the prompt computed, rate) that is erased by the first piece.
 */
#include "chat_io.h"

#include <errno.h>
#include <histedit.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <wchar.h>

#include "common.h"

/* ---- input -------------------------------------------------------------- */

struct dsr1_chat_input {
    EditLine *el;
    History *hist;
    HistEvent hev;
    volatile sig_atomic_t *intr;
    int paste, quote_nl, cont;
    unsigned char back[8]; /* bytes read ahead while looking for a paste mark */
    int nback, iback;
    char hist_path[4096];
};

/* 1 a byte from the terminal, 0 end of input, -1 interrupted or failed. */
static int read_byte(dsr1_chat_input *in, unsigned char *c)
{
    for (;;) {
        ssize_t r = read(0, c, 1);
        if (r == 1) return 1;
        if (r == 0) return 0;
        if (errno != EINTR || *in->intr) return -1;
    }
}

/* The next byte: pushed-back ones first. */
static int next_byte(dsr1_chat_input *in, unsigned char *c)
{
    if (in->iback < in->nback) {
        *c = in->back[in->iback++];
        return 1;
    }
    return read_byte(in, c);
}

/* After ESC: consume "[200~" (returns 1) or "[201~" (returns 0); anything
 * else is pushed back for libedit (returns -1). */
static int paste_mark(dsr1_chat_input *in)
{
    static const char start[] = "[200~", end[] = "[201~";
    in->nback = in->iback = 0;
    int maybe_start = 1, maybe_end = 1;
    for (int i = 0; i < 5 && (maybe_start || maybe_end); i++) {
        unsigned char c;
        if (read_byte(in, &c) != 1) break;
        in->back[in->nback++] = c;
        maybe_start &= c == (unsigned char)start[i];
        maybe_end &= c == (unsigned char)end[i];
    }
    if (in->nback == 5 && (maybe_start || maybe_end)) {
        in->nback = 0;
        return maybe_start;
    }
    return -1;
}

/* The rest of a UTF-8 character whose first byte is c. */
static int decode_utf8(dsr1_chat_input *in, unsigned char c, wchar_t *wc)
{
    int more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    unsigned cp = more == 3 ? c & 7u : more == 2 ? c & 15u : more == 1 ? c & 31u : c;
    for (int i = 0; i < more; i++) {
        unsigned char d;
        int r = next_byte(in, &d);
        if (r <= 0) return r;
        cp = (cp << 6) | (d & 63u);
    }
    *wc = (wchar_t)cp;
    return 1;
}

static int getc_fn(EditLine *el, wchar_t *wc)
{
    dsr1_chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    if (in->quote_nl) {
        in->quote_nl = 0;
        *wc = L'\n';
        return 1;
    }
    for (;;) {
        int from_back = in->iback < in->nback;
        unsigned char c;
        int r = next_byte(in, &c);
        if (r <= 0) return r;
        if (c == 0x1b && !from_back) {
            int mark = paste_mark(in);
            if (mark >= 0) {
                in->paste = mark;
                continue;
            }
        }
        if (in->paste && (c == '\r' || c == '\n')) {
            in->quote_nl = 1;
            *wc = 0x16; /* ^V: ed-quoted-insert takes the newline literally */
            return 1;
        }
        return decode_utf8(in, c, wc);
    }
}

static char *prompt_fn(EditLine *el)
{
    dsr1_chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return in->cont ? "... " : ">>> ";
}

dsr1_chat_input *dsr1_chat_input_open(const char *hist_path, volatile sig_atomic_t *intr)
{
    dsr1_chat_input *in = calloc(1, sizeof *in);
    if (!in) return NULL;
    in->intr = intr;
    in->el = el_init("dsr1", stdin, stdout, stderr);
    in->hist = history_init();
    if (!in->el || !in->hist) {
        dsr1_chat_input_close(in);
        return NULL;
    }
    history(in->hist, &in->hev, H_SETSIZE, 1000);
    history(in->hist, &in->hev, H_SETUNIQUE, 1);
    if (hist_path) {
        snprintf(in->hist_path, sizeof in->hist_path, "%s", hist_path);
        history(in->hist, &in->hev, H_LOAD, hist_path);
    }
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_HIST, history, in->hist);
    el_set(in->el, EL_PROMPT, prompt_fn);
    el_set(in->el, EL_GETCFN, getc_fn);
    el_source(in->el, NULL); /* the user's ~/.editrc */
    fputs("\033[?2004h", stdout); /* ask for bracketed paste */
    fflush(stdout);
    return in;
}

void dsr1_chat_input_close(dsr1_chat_input *in)
{
    if (!in) return;
    if (in->el) {
        fputs("\033[?2004l", stdout);
        fflush(stdout);
        el_end(in->el);
    }
    if (in->hist) {
        if (in->hist_path[0]) history(in->hist, &in->hev, H_SAVE, in->hist_path);
        history_end(in->hist);
    }
    free(in);
}

static int append(char **buf, size_t *n, const char *s, size_t k)
{
    char *b = realloc(*buf, *n + k + 1);
    if (!b) return -1;
    memcpy(b + *n, s, k);
    *n += k;
    b[*n] = 0;
    *buf = b;
    return 0;
}

int dsr1_chat_input_read(dsr1_chat_input *in, char **text)
{
    char *buf = NULL;
    size_t n = 0;
    in->cont = 0;
    for (;;) {
        int count = 0;
        in->paste = in->quote_nl = 0;
        in->nback = in->iback = 0;
        const char *line = el_gets(in->el, &count);
        if (!line || count <= 0) {
            int intr = *in->intr;
            el_reset(in->el);
            free(buf);
            if (intr) return DSR1_INPUT_INTR;
            return DSR1_INPUT_EOF;
        }
        size_t k = strlen(line);
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r')) k--;
        int more = k && line[k - 1] == '\\';
        if (append(&buf, &n, line, more ? k - 1 : k) || (more && append(&buf, &n, "\n", 1))) {
            free(buf);
            return DSR1_INPUT_EOF;
        }
        if (!more) break;
        in->cont = 1;
    }
    if (n) history(in->hist, &in->hev, H_ENTER, buf);
    *text = buf ? buf : calloc(1, 1);
    return DSR1_INPUT_OK;
}

/* ---- output ------------------------------------------------------------- */

const char *dsr1_chat_dim(int color) { return color ? "\033[2m" : ""; }
const char *dsr1_chat_bold(int color) { return color ? "\033[1m" : ""; }
const char *dsr1_chat_reset(int color) { return color ? "\033[0m" : ""; }

void dsr1_chat_view_begin(dsr1_chat_view *v, const dsr1_gen *gen, int forced_open)
{
    (void)forced_open; /* the header waits for the first reasoning text */
    v->gen = gen;
    v->in_think = v->thought = v->answer_started = 0;
    v->at_bol = 1;
    v->n_tail = 0;
    v->t_think = 0;
    v->line = NULL;
    v->drawn = 0;
    v->line_kind = DSR1_LINE_NONE;
}

/* ---- the in-place line ---------------------------------------------------
 *
 * HIDE, COLLAPSE and the prefill progress keep one line that is redrawn in
 * place. It is never wider than the terminal minus one column, so it never
 * wraps as drawn; but when the window is narrowed afterwards, terminals
 * that reflow (tmux, VTE, kitty, iTerm2) spread it over several rows, so
 * erasing goes up those rows first and clears to the end of the screen.
 * The rows are counted character by character (line_rows), since a wide
 * character that does not fit at a row's end starts the next row.
 */

static int term_cols(FILE *f)
{
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

/* Rows the drawn line takes at `cols` columns, less one. A reflowing
 * terminal moves a wide character that does not fit at a row's end to the
 * next row, so CJK text can take a row more than its width suggests (drawn
 * in 99 columns, then narrowed to 33: four rows, not three). */
static int line_rows(const dsr1_chat_view *v, int cols)
{
    if (v->drawn <= 0) return 0;
    if (v->n_cw < 0) /* not kept: the worst case, a column lost on every row */
        return cols > 2 ? (v->drawn - 1) / (cols - 1) : v->drawn;
    int rows = 0, col = 0;
    for (int i = 0; i < v->n_cw; i++) {
        int w = v->cw[i];
        if (col + w > cols) rows++, col = 0;
        col += w;
    }
    return rows;
}

static void line_erase(dsr1_chat_view *v)
{
    if (!v->line) return;
    int rows = line_rows(v, term_cols(v->line));
    if (rows > 0) fprintf(v->line, "\033[%dA\r\033[J", rows);
    else fputs("\r\033[K", v->line);
    fflush(v->line);
    v->line = NULL;
    v->drawn = 0;
}

/* Display columns of the UTF-8 character at s (n bytes), at least 0. */
static int char_cols(const char *s, size_t n)
{
    wchar_t wc;
    mbstate_t st;
    memset(&st, 0, sizeof st);
    size_t k = mbrtowc(&wc, s, n, &st);
    if (k == (size_t)-1 || k == (size_t)-2) return 1;
    int w = wcwidth(wc);
    return w < 0 ? 1 : w;
}

static void cw_add(dsr1_chat_view *v, int w)
{
    if (v->n_cw >= 0 && v->n_cw < (int)sizeof v->cw) v->cw[v->n_cw++] = (unsigned char)w;
    else v->n_cw = -1;
}

/* Draw head (ASCII) then the end of text[0, n) that fits, dimmed, as the
 * in-place line on f. */
static void line_draw(dsr1_chat_view *v, FILE *f, const char *head, const char *text, size_t n)
{
    line_erase(v);
    int room = term_cols(f) - 1, hl = (int)strlen(head);
    if (hl > room) hl = room;
    room -= hl;
    size_t from = n;
    int used = 0;
    while (from > 0) { /* back over whole UTF-8 characters while they fit */
        size_t st = from - 1;
        while (st > 0 && (text[st] & 0xc0) == 0x80) st--;
        int w = char_cols(text + st, from - st);
        if (used + w > room) break;
        used += w;
        from = st;
    }
    fprintf(f, "%s%.*s%.*s%s", dsr1_chat_dim(v->color), hl, head, (int)(n - from), text + from,
            dsr1_chat_reset(v->color));
    fflush(f);
    v->line = f;
    v->drawn = hl + used;
    v->n_cw = 0;
    for (int i = 0; i < hl; i++) cw_add(v, 1);
    for (size_t c = from; c < n;) {
        size_t e = c + 1;
        while (e < n && (text[e] & 0xc0) == 0x80) e++;
        cw_add(v, char_cols(text + c, e - c));
        c = e;
    }
}

/* The in-place line of HIDE / COLLAPSE (terminal only). */
static void think_status(dsr1_chat_view *v)
{
    if (!v->tty) return;
    v->line_kind = DSR1_LINE_THINK;
    if (v->mode == DSR1_THINK_HIDE) {
        char b[64];
        snprintf(b, sizeof b, "thinking... %d tokens", v->gen->n_reasoning_tokens);
        line_draw(v, v->rout, b, "", 0);
    } else {
        line_draw(v, v->rout, "thinking: ", v->tail, v->n_tail);
    }
}

void dsr1_chat_view_progress(dsr1_chat_view *v, FILE *f, int done, int total, double rate)
{
    char b[96];
    snprintf(b, sizeof b, "prompt: %d of %d tokens, %.0f tokens/s", done, total, rate);
    line_draw(v, f, b, "", 0);
    v->line_kind = DSR1_LINE_PROGRESS;
    v->p_done = done;
    v->p_total = total;
    v->p_rate = rate;
}

void dsr1_chat_view_redraw(dsr1_chat_view *v)
{
    if (!v->line) return;
    if (v->line_kind == DSR1_LINE_THINK) think_status(v);
    else if (v->line_kind == DSR1_LINE_PROGRESS)
        dsr1_chat_view_progress(v, v->line, v->p_done, v->p_total, v->p_rate);
}

void dsr1_chat_view_progress_end(dsr1_chat_view *v)
{
    if (v->line_kind != DSR1_LINE_PROGRESS) return;
    line_erase(v);
    v->line_kind = DSR1_LINE_NONE;
}

/* Keep the last characters of the reasoning on one line (newlines become
 * spaces; the cut never splits a UTF-8 character). */
static void tail_add(dsr1_chat_view *v, const char *t, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (v->n_tail == sizeof v->tail) {
            size_t drop = 1;
            while (drop < v->n_tail && (v->tail[drop] & 0xc0) == 0x80) drop++;
            memmove(v->tail, v->tail + drop, v->n_tail - drop);
            v->n_tail -= drop;
        }
        char c = t[i] == '\n' || t[i] == '\r' || t[i] == '\t' ? ' ' : t[i];
        v->tail[v->n_tail++] = c;
    }
}

static void think_open(dsr1_chat_view *v)
{
    v->in_think = 1;
    v->t_think0 = dsr1_common_now();
    if (v->mode == DSR1_THINK_SHOW)
        fprintf(v->rout, "%s%sthinking%s\n%s", dsr1_chat_dim(v->color), dsr1_chat_bold(v->color),
                dsr1_chat_reset(v->color), dsr1_chat_dim(v->color));
}

static void think_close(dsr1_chat_view *v, int finished)
{
    v->t_think = dsr1_common_now() - v->t_think0;
    if (v->mode == DSR1_THINK_SHOW)
        fprintf(v->rout, "%s%s", dsr1_chat_reset(v->color), v->at_bol ? "" : "\n");
    else
        line_erase(v);
    v->line_kind = DSR1_LINE_NONE;
    fprintf(v->rout, "%s-- %s %d tokens, %.1f s --%s\n%s", dsr1_chat_dim(v->color),
            finished ? "thought for" : "reasoning did not finish:",
            v->gen->n_reasoning_tokens, v->t_think, dsr1_chat_reset(v->color),
            finished ? "\n" : "");
    v->in_think = 0;
    v->thought = 1;
    v->at_bol = 1;
}

void dsr1_chat_view_piece(void *ctx, dsr1_gen_kind kind, const char *text, size_t len)
{
    dsr1_chat_view *v = ctx;
    dsr1_chat_view_progress_end(v);
    if (kind == DSR1_GEN_REASONING) {
        if (!v->in_think) think_open(v);
        if (v->mode == DSR1_THINK_SHOW) {
            fwrite(text, 1, len, v->rout);
            if (len) v->at_bol = text[len - 1] == '\n';
        } else {
            if (v->mode == DSR1_THINK_COLLAPSE) tail_add(v, text, len);
            think_status(v);
        }
        fflush(v->rout);
    } else if (kind == DSR1_GEN_THINK_END) {
        if (v->in_think) think_close(v, 1);
    } else if (len) {
        if (v->in_think) think_close(v, 1);
        fwrite(text, 1, len, v->out);
        v->answer_started = 1;
        v->at_bol = text[len - 1] == '\n';
        fflush(v->out);
    }
}

void dsr1_chat_view_end(dsr1_chat_view *v, const char *why)
{
    dsr1_chat_view_progress_end(v);
    if (v->in_think) think_close(v, 0);
    if (!v->at_bol) fputc('\n', v->out);
    if (why)
        fprintf(v->rout, "%s[%s]%s\n", dsr1_chat_dim(v->color), why, dsr1_chat_reset(v->color));
    fflush(v->out);
    fflush(v->rout);
}
