/*
 * chat_set.h - the `/set` command of `dsr1 chat`: the settings a running
 * conversation may change, each with its range, one spelling (the JSON
 * field name of `dsr1 run`) plus accepted aliases.
 *
 * Not here: the conversation, the terminal (chat.c writes the messages).
 */
#ifndef DSR1_CLI_CHAT_SET_H
#define DSR1_CLI_CHAT_SET_H

#include <stddef.h>
#include <stdio.h>

#include "core/sampler.h"

/* What /set changes: the chat's sampling settings and answer length. */
typedef struct dsr1_chat_settings {
    dsr1_sampling *sampling;
    int *max_tokens;
} dsr1_chat_settings;

/*
 * Apply "NAME VALUE" (the text after /set). Returns 0 and writes
 * "NAME = VALUE" to msg, or -1 and writes a one-line error to msg: unknown
 * name (with the list), a value that is not a finite number, not an integer
 * where one is needed, or out of range (with the range). Nothing changes on
 * error.
 */
int dsr1_chat_set(const dsr1_chat_settings *s, const char *arg, char *msg, size_t cap);

/* One line per setting, "  name  value  (range)", for /set alone. */
void dsr1_chat_set_list(const dsr1_chat_settings *s, FILE *f);

#endif
