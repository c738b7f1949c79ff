/*
 * chat_set.c - `/set` of `dsr1 chat` (see chat_set.h).
 *
 * One table holds each setting's name, aliases, range and whether it is an
 * integer; the ranges are those of the command-line flags (cli/common.c),
 * so a value /set refuses is one the flag refuses too. Values are parsed
 * with strtod and must be finite and consume the whole word: "inf", "nan",
 * "1e999", "3x" and "2.5" for an integer are refused instead of being cast.
 */
#include "chat_set.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_TEMP, S_TOPP, S_TOPK, S_MINP, S_REP, S_PRES, S_FREQ, S_SEED, S_MAXTOK } setting_id;

static const struct {
    const char *name, *alias;
    double lo, hi;
    int integer;
} table[] = {
    [S_TEMP] = {"temperature", "temp", 0, 100, 0},
    [S_TOPP] = {"top_p", "top-p", 0, 1, 0},
    [S_TOPK] = {"top_k", "top-k", 0, 1 << 30, 1},
    [S_MINP] = {"min_p", "min-p", 0, 1, 0},
    [S_REP] = {"repetition_penalty", "repeat_penalty", 0.001, 100, 0},
    [S_PRES] = {"presence_penalty", "presence-penalty", -2, 2, 0},
    [S_FREQ] = {"frequency_penalty", "frequency-penalty", -2, 2, 0},
    [S_SEED] = {"seed", NULL, 0, 9007199254740992.0, 1},
    /* The answer also ends at the context, as with --max-tokens. */
    [S_MAXTOK] = {"max_tokens", "max-tokens", 1, 1 << 30, 1},
};
enum { N_SETTINGS = sizeof table / sizeof table[0] };

static double get(const dsr1_chat_settings *s, int i)
{
    const dsr1_sampling *p = s->sampling;
    switch ((setting_id)i) {
    case S_TEMP: return p->temperature;
    case S_TOPP: return p->top_p;
    case S_TOPK: return p->top_k;
    case S_MINP: return p->min_p;
    case S_REP: return p->repetition_penalty;
    case S_PRES: return p->presence_penalty;
    case S_FREQ: return p->frequency_penalty;
    case S_SEED: return (double)p->seed;
    default: return *s->max_tokens;
    }
}

static void put(const dsr1_chat_settings *s, int i, double v)
{
    dsr1_sampling *p = s->sampling;
    switch ((setting_id)i) {
    case S_TEMP: p->temperature = (float)v; break;
    case S_TOPP: p->top_p = (float)v; break;
    case S_TOPK: p->top_k = (int)v; break;
    case S_MINP: p->min_p = (float)v; break;
    case S_REP: p->repetition_penalty = (float)v; break;
    case S_PRES: p->presence_penalty = (float)v; break;
    case S_FREQ: p->frequency_penalty = (float)v; break;
    case S_SEED: p->seed = (uint64_t)v; break;
    default: *s->max_tokens = (int)v; break;
    }
}

static int find(const char *name)
{
    for (int i = 0; i < N_SETTINGS; i++)
        if (!strcmp(name, table[i].name) || (table[i].alias && !strcmp(name, table[i].alias)))
            return i;
    return -1;
}

int dsr1_chat_set(const dsr1_chat_settings *s, const char *arg, char *msg, size_t cap)
{
    char name[40], val[64], extra[2];
    int k = sscanf(arg, "%39s %63s %1s", name, val, extra);
    if (k != 2) {
        snprintf(msg, cap, "usage: /set NAME VALUE (/set alone lists the settings)");
        return -1;
    }
    int i = find(name);
    if (i < 0) {
        snprintf(msg, cap, "/set %s: unknown setting (temperature, top_p, top_k, min_p, "
                 "repetition_penalty, presence_penalty, frequency_penalty, seed, max_tokens)", name);
        return -1;
    }
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    double lo = table[i].lo, hi = table[i].hi;
    if (end == val || *end || errno || !isfinite(v) || v < lo || v > hi ||
        (table[i].integer && v != floor(v))) {
        snprintf(msg, cap, table[i].integer ? "/set %s %s: expected %s in [%.0f, %.0f]"
                                            : "/set %s %s: expected %s in [%g, %g]",
                 table[i].name, val, table[i].integer ? "an integer" : "a number", lo, hi);
        return -1;
    }
    put(s, i, v);
    snprintf(msg, cap, table[i].integer ? "%s = %.0f" : "%s = %.7g", table[i].name, get(s, i));
    return 0;
}

void dsr1_chat_set_list(const dsr1_chat_settings *s, FILE *f)
{
    for (int i = 0; i < N_SETTINGS; i++) {
        char range[64];
        snprintf(range, sizeof range, table[i].integer ? "[%.0f, %.0f] integer" : "[%g, %g]",
                 table[i].lo, table[i].hi);
        char val[32];
        snprintf(val, sizeof val, table[i].integer ? "%.0f" : "%.7g", get(s, i));
        fprintf(f, "  %-19s %-12s %s\n", table[i].name, val, range);
    }
}
