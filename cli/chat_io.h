/*
 * chat_io.h - the terminal side of `dsr1 chat`: reading a user turn with
 * line editing (libedit), history, trailing-backslash continuation and
 * bracketed paste; and showing a streamed answer with its reasoning set
 * apart (shown dimmed, hidden behind a counter, or collapsed to one line).
 *
 * Not here: the conversation, the engine, commands (chat.c).
 */
#ifndef DSR1_CLI_CHAT_IO_H
#define DSR1_CLI_CHAT_IO_H

#include <signal.h>
#include <stdio.h>

#include "run_gen.h"

/* ---- input -------------------------------------------------------------- */

typedef struct dsr1_chat_input dsr1_chat_input;

enum { DSR1_INPUT_OK = 0, DSR1_INPUT_EOF = 1, DSR1_INPUT_INTR = 2 };

/* Line editor on the terminal; history is loaded from and saved to
 * hist_path (NULL: none). intr is the flag the SIGINT handler raises. */
dsr1_chat_input *dsr1_chat_input_open(const char *hist_path, volatile sig_atomic_t *intr);
/* One turn: *text is malloc'd (lines joined with "\n" while they end in a
 * backslash; a bracketed paste keeps its newlines). DSR1_INPUT_EOF on
 * Ctrl-D at an empty prompt, DSR1_INPUT_INTR on Ctrl-C. */
int dsr1_chat_input_read(dsr1_chat_input *in, char **text);
void dsr1_chat_input_close(dsr1_chat_input *in); /* saves history; NULL ok */

/* ---- output ------------------------------------------------------------- */

typedef enum { DSR1_THINK_SHOW = 0, DSR1_THINK_HIDE = 1, DSR1_THINK_COLLAPSE = 2 } dsr1_think_mode;

/* One turn's display. answer goes to `out`, reasoning to `rout` (the same
 * FILE on a terminal; stderr when stdout is a pipe). */
typedef struct dsr1_chat_view {
    FILE *out, *rout;
    int color, tty;             /* tty: rout is a terminal (in-place lines) */
    dsr1_think_mode mode;
    const dsr1_gen *gen;        /* for the reasoning token count */
    int in_think, thought, answer_started, at_bol;
    double t_think0, t_think;   /* start of the reasoning, its duration */
    char tail[1024];            /* collapse: the last reasoning characters (more
                                 * than any terminal line shows) */
    size_t n_tail;
    FILE *line;                 /* where the in-place line is drawn, or NULL */
    int drawn;                  /* its width in columns when drawn */
    unsigned char cw[1024];     /* the columns of each character drawn, in order
                                 * (a narrowed terminal wraps a wide one early) */
    int n_cw;                   /* characters in cw; -1: more than it holds */
    int line_kind;              /* DSR1_LINE_* */
    int p_done, p_total;        /* the last progress shown (for a redraw) */
    double p_rate;
} dsr1_chat_view;

enum { DSR1_LINE_NONE = 0, DSR1_LINE_THINK = 1, DSR1_LINE_PROGRESS = 2 };

void dsr1_chat_view_begin(dsr1_chat_view *v, const dsr1_gen *gen, int forced_open);
/* The dsr1_gen sink (ctx = the view). */
void dsr1_chat_view_piece(void *ctx, dsr1_gen_kind kind, const char *text, size_t len);
/* Prompt progress as an in-place line on f (a terminal): "prompt: done of
 * total tokens, rate tokens/s". Erased by the first piece of the answer, by
 * dsr1_chat_view_progress_end and by dsr1_chat_view_end. */
void dsr1_chat_view_progress(dsr1_chat_view *v, FILE *f, int done, int total, double rate);
void dsr1_chat_view_progress_end(dsr1_chat_view *v);
/* Draw the in-place line again for the terminal's current width (after
 * SIGWINCH); nothing when none is shown. */
void dsr1_chat_view_redraw(dsr1_chat_view *v);
/* End of the turn: close an open reasoning display (noting when it never
 * ended), finish the answer line. why: NULL, or "stopped" etc. */
void dsr1_chat_view_end(dsr1_chat_view *v, const char *why);

/* Dim/bold/reset escapes, or "" without colour. */
const char *dsr1_chat_dim(int color);
const char *dsr1_chat_bold(int color);
const char *dsr1_chat_reset(int color);

#endif
