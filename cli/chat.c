/*
 * chat.c - `dsr1 chat`: a conversation in the terminal, or one turn from
 * a pipe.
 *
 * The conversation is kept as OpenAI-shaped messages (cJSON) and rendered
 * through the model's template every turn; the history keeps each answer
 * without its reasoning (what R1's template would keep anyway). The KV
 * cache of the previous turn is handed to the next request
 * (dsr1_request.reuse_seq) so only the new tail of the prompt is computed;
 * the engine takes the kept sequence over, so it is never released here
 * once reused.
 *
 * Owns: options, the turn loop, the /commands, SIGINT and SIGWINCH
 * handling (flags; the only global state, allowed in cli/). Terminal input and the
 * streamed display are chat_io.c; the /save format is chat_save.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <locale.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat_io.h"
#include "chat_save.h"
#include "chat_set.h"
#include "cli.h"
#include "common.h"
#include "run_req.h"

static volatile sig_atomic_t interrupted, resized;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void on_sigwinch(int sig)
{
    (void)sig;
    resized = 1;
}

/* KV slots: the turn, and the cancelled one whose finish is still owed. */
enum { CHAT_SEQS = 2 };

typedef struct chat {
    dsr1_model *m;
    dsr1_engine *e;
    const dsr1_tokenizer *tk;
    dsr1_prompt_opts popts;
    dsr1_sampling sampling;
    int max_tokens;
    char *system;          /* owned; NULL = none */
    cJSON *msgs;           /* the conversation, system prompt excluded */
    int kept;              /* the last turn's sequence (KV reuse), or -1 */
    dsr1_think_mode mode;
    int color, turns;
    dsr1_seq_stats last;   /* the last turn's numbers, for /stats */
    int have_last, last_reasoning;
    dsr1_event *ev;
} chat;

static const char usage_text[] =
    "usage: dsr1 chat [OPTIONS]\n"
    "\n"
    "Talk to the model. On a terminal: line editing and history, a trailing \\\n"
    "continues the line, /help lists the commands, Ctrl-C stops an answer,\n"
    "Ctrl-D quits. With stdin not a terminal: the whole input is one user turn,\n"
    "the answer goes to stdout (reasoning to stderr), then it exits.\n"
    "\n"
    "  -m, --model FILE        model file (default: $DSR1_MODEL, then the data directory)\n"
    "      --system TEXT       system prompt\n"
    "      --max-tokens N      tokens per answer at most (default 4096)\n"
    "      --temperature T     0 is greedy (default 0.6)\n"
    "      --top-p P           (default 0.95)\n"
    "      --top-k K           (default 0, off)\n"
    "      --min-p P           (default 0, off)\n"
    "      --repetition-penalty R  over the last 64 tokens (default 1, off; also\n"
    "                          --repeat-penalty)\n"
    "      --presence-penalty P, --frequency-penalty F  OpenAI's, -2..2 (default 0)\n"
    "      --seed N            turn k samples with seed N + k (default 0)\n"
    "      --think MODE        show, hide or collapse the reasoning (default show)\n"
    "      --no-think          skip the reasoning block (R1)\n"
    "      --template NAME     v3, r1 or raw (default: the model's own)\n"
    "      --no-color          no colour (also: NO_COLOR set in the environment)\n"
    "      --ctx N             tokens per conversation (default: the model's, capped by memory)\n"
    "      --spec-draft N      MTP draft tokens per step: -1 adaptive (default), 0 off, 1..8\n"
    "      --prefill-chunk N   prompt tokens per step (default 512; for many experts up to\n"
    "                          2048, so each expert sees ~64 of them: R1 2048)\n"
    "      --kv-type T         KV cache bf16 (default) or fp8 (half the bytes, a little less exact)\n"
    "      --verify            check every tensor's hash before loading (reads the whole file)\n"
    DSR1_HELP_COMPUTE_MODES
    "      --threads N         CPU threads (default: one per physical core)\n"
    "      --numa MODE         auto (the machine's NUMA nodes), off, or virtual:N (test split)\n"
    "      --backend NAME      auto, cpu, cuda or hip (default auto)\n"
    "      --preload           read the weights into memory first, with progress (default on\n"
    "                          a terminal when the file is not yet in the page cache)\n"
    "      --no-preload        do not (pages are then read on first use)\n"
    "      --mlock             preload and lock the weights in memory\n"
    "      --no-prefix-cache   compute every prompt in full (default: prompts share the KV\n"
    "                          cache of a common prefix, e.g. a system prompt)\n"
    "  -h, --help              this help\n";

static const char help_text[] =
    "  /help                 this list\n"
    "  /reset                forget the conversation (keeps the system prompt)\n"
    "  /system TEXT          set the system prompt (empty: none)\n"
    "  /set [NAME VALUE]     list the settings, or set temperature, top_p, top_k, min_p,\n"
    "                        repetition_penalty, presence_penalty, frequency_penalty,\n"
    "                        seed or max_tokens\n"
    "  /think show|hide|collapse   how reasoning is displayed\n"
    "  /stats                numbers of the last answer\n"
    "  /save FILE            save the conversation and its KV cache (zstd)\n"
    "  /load FILE            load a saved conversation\n"
    "  /quit                 leave (also Ctrl-D)\n"
    "  A line ending in \\ continues on the next; Ctrl-C stops an answer.\n";

/* ---- one turn --------------------------------------------------------- */

/* The conversation with the system prompt in front, as the template wants. */
static int conversation(chat *c, dsr1_chat **out, dsr1_error *err)
{
    cJSON *root = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(root, "messages");
    if (c->system) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "role", "system");
        cJSON_AddStringToObject(s, "content", c->system);
        cJSON_AddItemToArray(all, s);
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, c->msgs) cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
    int rc = dsr1_chat_from_json(out, root, err);
    cJSON_Delete(root);
    return rc;
}

static void add_message(chat *c, const char *role, const char *content, const char *reasoning)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", role);
    cJSON_AddStringToObject(o, "content", content);
    if (reasoning) cJSON_AddStringToObject(o, "reasoning_content", reasoning);
    cJSON_AddItemToArray(c->msgs, o);
}

/* Prompt progress, once a prefill has taken a noticeable time (short
 * prompts never show it). */
static void show_progress(chat *c, int seq, dsr1_chat_view *v, FILE *pf, double t0)
{
    dsr1_seq_stats st;
    int fed = dsr1_engine_seq_fed(c->e, seq);
    double dt = dsr1_common_now() - t0;
    if (!pf || dt < 0.3 || dsr1_engine_seq_stats(c->e, seq, &st) || fed >= st.n_prompt) return;
    dsr1_chat_view_progress(v, pf, fed, st.n_prompt, (fed - st.n_cached) / dt);
}

/* Step until seq finishes (or Ctrl-C cancels it). pf: where prompt
 * progress goes (a terminal), or NULL. */
static int generate(chat *c, int seq, dsr1_gen *g, dsr1_chat_view *v, FILE *pf,
                    dsr1_finish *fin, dsr1_error *err)
{
    double t0 = dsr1_common_now();
    int answering = 0;
    *fin = DSR1_FINISH_NONE;
    while (*fin == DSR1_FINISH_NONE) {
        if (interrupted) {
            dsr1_engine_cancel(c->e, seq);
            *fin = DSR1_FINISH_CANCEL;
            break;
        }
        if (resized) {
            resized = 0;
            dsr1_chat_view_redraw(v);
        }
        size_t n = 0;
        DSR1_TRY(dsr1_engine_step(c->e, c->ev, &n, err));
        for (size_t i = 0; i < n; i++) {
            const dsr1_event *ev = &c->ev[i];
            if (ev->seq != seq) continue; /* e.g. the finish of a cancelled turn */
            if (ev->token >= 0) answering = 1;
            if (ev->token >= 0 && dsr1_gen_push(g, ev->token, err) < 0) return DSR1_ENOMEM;
            if (ev->finish == DSR1_FINISH_ERROR)
                return dsr1_errorf(err, DSR1_EIO, "generation failed: %s",
                                   ev->message ? ev->message : "engine error");
            if (ev->finish) *fin = ev->finish;
        }
        if (!answering && *fin == DSR1_FINISH_NONE) show_progress(c, seq, v, pf, t0);
    }
    return dsr1_gen_finish(g, err);
}

static int submit(chat *c, const int32_t *ids, size_t n, int *seq, dsr1_error *err)
{
    dsr1_request q = {0};
    q.prompt = ids;
    q.n_prompt = n;
    q.max_tokens = c->max_tokens;
    q.sampling = c->sampling;
    q.sampling.seed += (uint64_t)c->turns + 1; /* reproducible, different per turn */
    q.reuse_seq = c->kept;
    return dsr1_engine_submit(c->e, &q, seq, err);
}

/* The answer and reasoning go into the history; the sequence is kept. */
static void end_turn(chat *c, int seq, const dsr1_gen *g)
{
    char *answer = dsr1_gen_answer(g), *reasoning = dsr1_gen_reasoning(g);
    add_message(c, "assistant", answer ? answer : "", reasoning);
    free(answer);
    free(reasoning);
    c->have_last = dsr1_engine_seq_stats(c->e, seq, &c->last) == 0;
    c->last_reasoning = g->n_reasoning_tokens;
    c->kept = seq; /* the previous kept sequence was taken over by this one */
    c->turns++;
}

/* How to go on when the conversation fills the context. */
static void context_hint(const chat *c, int tty)
{
    fprintf(stderr, tty ? "dsr1: the conversation fills the context of %d tokens: /reset starts "
                          "over (/save FILE first keeps it), or restart with a larger --ctx\n"
                        : "dsr1: the prompt fills the context of %d tokens: shorten it or use a "
                          "larger --ctx\n", dsr1_engine_ctx(c->e));
}

/* Why a turn ended, for the line after it; and whether the context is full. */
static const char *ended(chat *c, int seq, dsr1_finish fin, int *full)
{
    dsr1_seq_stats st;
    *full = fin == DSR1_FINISH_LENGTH && !dsr1_engine_seq_stats(c->e, seq, &st) &&
            st.n_prompt + st.n_generated >= dsr1_engine_ctx(c->e);
    return fin == DSR1_FINISH_CANCEL ? "stopped"
           : *full                  ? "context full"
           : fin == DSR1_FINISH_LENGTH ? "max_tokens reached" : NULL;
}

static int turn(chat *c, const char *text, FILE *out, FILE *rout, int tty, dsr1_error *err)
{
    add_message(c, "user", text, NULL);
    dsr1_chat *conv = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int forced = 0, seq = -1;
    dsr1_chat_view v = {0};
    v.out = out;
    v.rout = rout;
    v.color = c->color;
    v.tty = tty;
    v.mode = c->mode;
    dsr1_gen g = {0};
    int rc = conversation(c, &conv, err);
    if (!rc) rc = dsr1_gen_prompt(c->tk, &c->popts, conv, NULL, &ids, &n, &forced, err);
    if (!rc) rc = dsr1_gen_init(&g, c->tk, dsr1_model_config(c->m)->eos_token_id, forced, NULL, 0,
                                dsr1_chat_view_piece, &v, err);
    if (!rc) rc = submit(c, ids, n, &seq, err);
    free(ids);
    dsr1_chat_free(conv);
    if (rc) { /* nothing was generated: the user turn is taken back */
        cJSON_DeleteItemFromArray(c->msgs, cJSON_GetArraySize(c->msgs) - 1);
        dsr1_gen_free(&g);
        if (rc == DSR1_ERANGE && n) { /* the prompt does not fit: say so, then how */
            dsr1_cli_fail(err);
            context_hint(c, tty);
            err->msg[0] = 0; /* printed */
        }
        return rc;
    }
    c->kept = -1; /* handed to the engine with the request */
    dsr1_chat_view_begin(&v, &g, forced);
    dsr1_finish fin;
    FILE *pf = tty ? stderr : isatty(2) ? stderr : NULL;
    rc = generate(c, seq, &g, &v, pf, &fin, err);
    int full = 0;
    dsr1_chat_view_end(&v, ended(c, seq, fin, &full));
    if (full) context_hint(c, tty);
    if (!rc || rc == DSR1_EIO) end_turn(c, seq, &g);
    dsr1_gen_free(&g);
    return rc;
}

/* ---- commands ----------------------------------------------------------- */

static void cmd_stats(chat *c)
{
    if (!c->have_last) {
        fprintf(stderr, "no answer yet\n");
        return;
    }
    const dsr1_seq_stats *s = &c->last;
    double ttft = s->t_first_token > 0 ? (s->t_first_token - s->t_queued) * 1e3 : 0;
    double dt = s->t_done > s->t_first_token ? s->t_done - s->t_first_token : 0;
    fprintf(stderr,
            "prompt %d tokens (%d reused from the cache), answer %d tokens (%d reasoning)\n",
            s->n_prompt, s->n_cached, s->n_generated, c->last_reasoning);
    fprintf(stderr, "time to first token %.0f ms, %.1f tokens/s\n", ttft,
            dt > 0 && s->n_generated > 1 ? (s->n_generated - 1) / dt : 0.0);
    if (s->spec_drafted > 0)
        fprintf(stderr, "speculative: %d of %d drafted tokens accepted (%.0f%%) in %d steps\n",
                s->spec_accepted, s->spec_drafted, 100.0 * s->spec_accepted / s->spec_drafted,
                s->spec_steps);
    else
        fprintf(stderr, "speculative decoding: not used\n");
}

static void cmd_set(chat *c, const char *arg)
{
    dsr1_chat_settings st = {&c->sampling, &c->max_tokens};
    if (!*arg) {
        dsr1_chat_set_list(&st, stderr);
        fprintf(stderr, "  %-19s %s\n", "think (/think)",
                c->mode == DSR1_THINK_SHOW ? "show" : c->mode == DSR1_THINK_HIDE ? "hide"
                                                                                 : "collapse");
        return;
    }
    char msg[256];
    int rc = dsr1_chat_set(&st, arg, msg, sizeof msg);
    fprintf(stderr, "%s%s\n", rc ? "dsr1: " : "", msg);
}

static void forget_kv(chat *c)
{
    if (c->kept >= 0) dsr1_engine_release(c->e, c->kept);
    c->kept = -1;
}

static void cmd_save(chat *c, const char *path)
{
    dsr1_error err = {0};
    void *kv = NULL;
    size_t len = 0;
    if (c->kept >= 0 && dsr1_engine_seq_export(c->e, c->kept, &kv, &len, &err))
        fprintf(stderr, "dsr1: KV cache not saved (%s); the conversation is\n", err.msg);
    cJSON *h = cJSON_CreateObject();
    cJSON_AddItemToObject(h, "messages", cJSON_Duplicate(c->msgs, 1));
    if (c->system) cJSON_AddStringToObject(h, "system", c->system);
    if (dsr1_chat_save_write(path, h, kv, len, &err)) dsr1_cli_fail(&err);
    else
        fprintf(stderr, "saved %d messages and %zu KV bytes to %s\n",
                cJSON_GetArraySize(c->msgs), len, path);
    cJSON_Delete(h);
    free(kv);
}

/* A loaded conversation must work for the next turn: user and assistant
 * messages with string contents, and a rendering that leaves room in the
 * context. 0, or -1 after printing why not. */
static int check_loaded(chat *c, const char *path, cJSON *msgs, const cJSON *sys)
{
    int i = 0;
    const cJSON *m;
    if (sys && !cJSON_IsString(sys) && !cJSON_IsNull(sys)) {
        fprintf(stderr, "dsr1: %s: \"system\" is not a string; not loaded\n", path);
        return -1;
    }
    cJSON_ArrayForEach(m, msgs) {
        i++;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        const char *why = !cJSON_IsObject(m) ? "not an object"
                          : strcmp(r, "user") && strcmp(r, "assistant")
                              ? "role is not \"user\" or \"assistant\""
                          : !cJSON_IsString(text) ? "content is not a string"
                          : rs && (!cJSON_IsString(rs) || strcmp(r, "assistant"))
                              ? "reasoning_content is not an assistant's string" : NULL;
        if (why) {
            fprintf(stderr, "dsr1: %s: message %d: %s; not loaded\n", path, i, why);
            return -1;
        }
    }
    /* Render it as the next turn will (its own message comes on top). */
    cJSON *keep_msgs = c->msgs;
    char *keep_sys = c->system;
    c->msgs = msgs;
    c->system = cJSON_IsString(sys) ? sys->valuestring : NULL;
    dsr1_chat *conv = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int forced = 0, ctx = dsr1_engine_ctx(c->e);
    dsr1_error err = {0};
    int rc = conversation(c, &conv, &err);
    if (!rc) rc = dsr1_gen_prompt(c->tk, &c->popts, conv, NULL, &ids, &n, &forced, &err);
    c->msgs = keep_msgs;
    c->system = keep_sys;
    dsr1_chat_free(conv);
    free(ids);
    if (rc) {
        fprintf(stderr, "dsr1: %s: the conversation does not render: %s; not loaded\n", path,
                err.msg);
        return -1;
    }
    if (n + 1 >= (size_t)ctx) {
        fprintf(stderr, "dsr1: %s: the conversation takes %zu tokens, more than the context of "
                "%d leaves for an answer; not loaded (start dsr1 chat with --ctx %zu or more)\n",
                path, n, ctx, n + 1024);
        return -1;
    }
    return 0;
}

/* The most a save of this context can hold: the header (the conversation
 * as JSON, reasoning included) and the KV export of a full context. */
static size_t save_json_max(const chat *c)
{
    return ((size_t)64 << 20) + (size_t)dsr1_engine_ctx(c->e) * 256;
}

static void cmd_load(chat *c, const char *path)
{
    dsr1_error err = {0};
    cJSON *h = NULL;
    void *kv = NULL;
    size_t len = 0;
    if (dsr1_chat_save_read(path, save_json_max(c), dsr1_engine_seq_export_max(c->e), &h, &kv,
                            &len, &err)) {
        dsr1_cli_fail(&err);
        return;
    }
    cJSON *msgs = cJSON_DetachItemFromObject(h, "messages");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(h, "system");
    if (!cJSON_IsArray(msgs)) {
        fprintf(stderr, "dsr1: %s: no messages in the save; not loaded\n", path);
    } else if (check_loaded(c, path, msgs, sys) == 0) {
        cJSON_Delete(c->msgs);
        c->msgs = msgs;
        msgs = NULL;
        free(c->system);
        c->system = cJSON_IsString(sys) ? strdup(sys->valuestring) : NULL;
        forget_kv(c);
        int seq = -1;
        if (len && dsr1_engine_seq_import(c->e, kv, len, &seq, &err))
            fprintf(stderr, "dsr1: %s: KV cache not restored (%s); it will be recomputed\n",
                    path, err.msg);
        else if (len)
            c->kept = seq;
        fprintf(stderr, "loaded %d messages%s\n", cJSON_GetArraySize(c->msgs),
                c->kept >= 0 ? " and their KV cache" : "");
    }
    cJSON_Delete(msgs);
    cJSON_Delete(h);
    free(kv);
}

/* 1 when the command asks to quit. */
static int command(chat *c, const char *line)
{
    char name[16] = "";
    sscanf(line, "/%15s", name);
    const char *arg = line + 1 + strlen(name);
    while (*arg == ' ') arg++;
    if (!strcmp(name, "quit") || !strcmp(name, "exit")) return 1;
    if (!strcmp(name, "help")) fputs(help_text, stderr);
    else if (!strcmp(name, "reset")) {
        cJSON_Delete(c->msgs);
        c->msgs = cJSON_CreateArray();
        forget_kv(c);
        c->have_last = 0;
        fprintf(stderr, "conversation cleared\n");
    } else if (!strcmp(name, "system")) {
        free(c->system);
        c->system = *arg ? strdup(arg) : NULL;
        fprintf(stderr, c->system ? "system prompt set\n" : "system prompt removed\n");
    } else if (!strcmp(name, "set")) cmd_set(c, arg);
    else if (!strcmp(name, "think")) {
        if (!strcmp(arg, "show")) c->mode = DSR1_THINK_SHOW;
        else if (!strcmp(arg, "hide")) c->mode = DSR1_THINK_HIDE;
        else if (!strcmp(arg, "collapse")) c->mode = DSR1_THINK_COLLAPSE;
        else fprintf(stderr, "usage: /think show|hide|collapse\n");
    } else if (!strcmp(name, "stats")) cmd_stats(c);
    else if (!strcmp(name, "save") && *arg) cmd_save(c, arg);
    else if (!strcmp(name, "load") && *arg) cmd_load(c, arg);
    else fprintf(stderr, "unknown command %s (try /help)\n", line);
    return 0;
}

/* ---- loops -------------------------------------------------------------- */

/* mkdir -p (0700 for what it creates: history is private). */
static int mkdir_p(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0700) && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0700) && errno != EEXIST ? -1 : 0;
}

static int interactive(chat *c)
{
    char hist[4200], dir[4096];
    dsr1_common_data_dir(dir, sizeof dir);
    snprintf(hist, sizeof hist, "%s/chat_history", dir);
    if (mkdir_p(dir) != 0)
        fprintf(stderr, "dsr1: %s: %s; history will not be kept\n", dir, strerror(errno));
    dsr1_chat_input *in = dsr1_chat_input_open(access(dir, W_OK) == 0 ? hist : NULL, &interrupted);
    if (!in) {
        fprintf(stderr, "dsr1: cannot start the line editor\n");
        return 1;
    }
    fprintf(stderr, "%sType a message, /help for commands, Ctrl-D to quit.%s\n",
            dsr1_chat_dim(c->color), dsr1_chat_reset(c->color));
    int intr_at_prompt = 0, rc = 0;
    for (;;) {
        char *text = NULL;
        interrupted = 0;
        int r = dsr1_chat_input_read(in, &text);
        if (r == DSR1_INPUT_EOF) break;
        if (r == DSR1_INPUT_INTR) {
            if (intr_at_prompt) break;
            intr_at_prompt = 1;
            fprintf(stderr, "\n(Ctrl-C again or Ctrl-D to quit)\n");
            continue;
        }
        intr_at_prompt = 0;
        int quit = 0;
        dsr1_error err = {0};
        if (text[0] == '/') quit = command(c, text);
        else if (text[0] && turn(c, text, stdout, stdout, 1, &err) && err.msg[0])
            dsr1_cli_fail(&err);
        free(text);
        if (quit) break;
    }
    fputc('\n', stderr);
    dsr1_chat_input_close(in);
    return rc;
}

/* stdin is not a terminal: all of it is one user turn. */
static int piped(chat *c)
{
    char *text;
    size_t len;
    dsr1_error err = {0};
    if (dsr1_common_read_all("-", &text, &len, &err)) return dsr1_cli_fail(&err);
    int rc = turn(c, text, stdout, stderr, 0, &err);
    free(text);
    return !rc ? 0 : err.msg[0] ? dsr1_cli_fail(&err) : 1;
}

/* ---- options and entry -------------------------------------------------- */

typedef struct chat_args {
    const char *model, *template_name, *backend, *system;
    int no_think, no_color, max_tokens;
    dsr1_think_mode mode;
    dsr1_sampling sampling;
    dsr1_gen_flags gen;      /* ctx, threads, spec_draft; sampling/max_tokens point above */
} chat_args;

enum { O_SYSTEM = 256, O_THINK, O_NOTHINK, O_TEMPLATE, O_NOCOLOR, O_BACKEND };

static const struct option longopts[] = {
    {"model", required_argument, 0, 'm'},    {"system", required_argument, 0, O_SYSTEM},
    {"think", required_argument, 0, O_THINK}, {"no-think", no_argument, 0, O_NOTHINK},
    {"template", required_argument, 0, O_TEMPLATE}, {"no-color", no_argument, 0, O_NOCOLOR},
    {"backend", required_argument, 0, O_BACKEND}, {"help", no_argument, 0, 'h'},
    DSR1_GEN_LONGOPTS,                       {0, 0, 0, 0}};

/* 0 ok, 1 help printed, 2 usage error. */
static int parse_args(chat_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    dsr1_sampling_default(&a->sampling);
    a->max_tokens = 4096;
    a->gen = (dsr1_gen_flags){.sampling = &a->sampling, .max_tokens = &a->max_tokens,
                              .spec_draft = -1};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case O_SYSTEM: a->system = optarg; break;
        case O_NOTHINK: a->no_think = 1; break;
        case O_TEMPLATE: a->template_name = optarg; break;
        case O_NOCOLOR: a->no_color = 1; break;
        case O_BACKEND: a->backend = optarg; break;
        case O_THINK:
            if (!strcmp(optarg, "show")) a->mode = DSR1_THINK_SHOW;
            else if (!strcmp(optarg, "hide")) a->mode = DSR1_THINK_HIDE;
            else if (!strcmp(optarg, "collapse")) a->mode = DSR1_THINK_COLLAPSE;
            else
                return dsr1_cli_usage("chat", "--think %s: expected show, hide or collapse",
                                      optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 1;
        case '?': return dsr1_cli_usage("chat", "bad option");
        default: if (dsr1_common_gen_flag("chat", &a->gen, c, optarg)) return 2;
        }
    }
    if (optind < argc) return dsr1_cli_usage("chat", "unexpected argument '%s'", argv[optind]);
    return 0;
}

static int open_chat(chat *c, const chat_args *a, dsr1_error *err)
{
    char path[4096], warn[256];
    DSR1_TRY(dsr1_common_model_path(a->model, path, sizeof path, err));
    DSR1_TRY(dsr1_common_open_checked(&c->m, path, a->backend, &a->gen, CHAT_SEQS, NULL, 0, err));
    if (!(c->tk = dsr1_model_tokenizer(c->m)))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: the model file has no tokenizer", path);
    DSR1_TRY(dsr1_gen_prompt_opts(&c->popts, c->m, a->template_name, a->no_think, warn,
                                  sizeof warn, err));
    if (warn[0]) fprintf(stderr, "dsr1: %s\n", warn);
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = CHAT_SEQS;
    if (a->gen.ctx) eo.ctx = a->gen.ctx;
    eo.spec_draft = a->gen.spec_draft;
    eo.prefill_chunk = a->gen.prefill_chunk;
    if (a->gen.kv_fp8) eo.kv_type = DSR1_KV_FP8;
    eo.prefix_cache = !a->gen.no_prefix_cache;
    DSR1_TRY(dsr1_engine_create(&c->e, c->m, &eo, err));
    c->ev = calloc(dsr1_engine_max_events(c->e), sizeof *c->ev);
    c->msgs = cJSON_CreateArray();
    if (!c->ev || !c->msgs) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    return 0;
}

int dsr1_cmd_chat(int argc, char **argv)
{
    chat_args a;
    int u = parse_args(&a, argc, argv);
    if (u) return u == 1 ? 0 : 2;
    setlocale(LC_CTYPE, ""); /* libedit needs it for UTF-8 input */
    int tty = isatty(0) && isatty(1);
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt returns */
    sigaction(SIGINT, &sa, NULL);
    struct sigaction sw = {0};
    sw.sa_handler = on_sigwinch;
    sw.sa_flags = SA_RESTART; /* a resize never interrupts reading a line */
    sigaction(SIGWINCH, &sw, NULL);
    chat c = {0};
    c.kept = -1;
    c.sampling = a.sampling;
    c.max_tokens = a.max_tokens;
    c.mode = a.mode;
    c.color = dsr1_common_use_color(tty ? 1 : 2, a.no_color);
    c.system = a.system ? strdup(a.system) : NULL;
    dsr1_error err = {0};
    int rc = open_chat(&c, &a, &err) ? dsr1_cli_fail(&err) : tty ? interactive(&c) : piped(&c);
    cJSON_Delete(c.msgs);
    free(c.ev);
    free(c.system);
    dsr1_engine_free(c.e);
    dsr1_model_close(c.m);
    return rc;
}
