/*
 * run.c - `dsr1 run`: option parsing, then either the JSONL batch
 * (run_batch.c) or the prompt mode: one prompt from the command line or
 * stdin, the answer streamed to stdout and the reasoning to stderr, so it
 * works as a pipeline stage.
 *
 * Owns the process-level pieces: SIGINT/SIGTERM set a flag the loops poll
 * (the one piece of global state, allowed in cli/), and the exit codes:
 * 0 all requests answered, 1 a request or the run failed, 2 usage.
 */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "common.h"
#include "run_batch.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static const char usage_text[] =
    "usage: dsr1 run [OPTIONS] --in REQUESTS.jsonl [--out RESULTS.jsonl]\n"
    "       dsr1 run [OPTIONS] \"PROMPT\"\n"
    "       dsr1 run [OPTIONS] -            (the prompt is read from stdin)\n"
    "\n"
    "Batch: one request per line, {\"id\":..., \"messages\":[...]} or\n"
    "{\"id\":..., \"prompt\":\"...\"} (or the OpenAI batch shape\n"
    "{\"custom_id\":..., \"body\":{...}}), one result per line.\n"
    "Prompt: the answer goes to stdout, the reasoning to stderr.\n"
    "\n"
    "  -m, --model FILE        model file (default: $DSR1_MODEL, then the data directory)\n"
    "      --in FILE           requests (JSONL; - is stdin; zstd input is detected)\n"
    "      --out FILE          results (JSONL; - is stdout, the default; *.zst is compressed)\n"
    "      --resume            skip requests whose id is already in --out, append the rest\n"
    "      --unordered         write each result when it finishes, not in input order\n"
    "  -j, --parallel N        requests in flight at once (default 8)\n"
    "  -q, --quiet             no progress or summary on stderr\n"
    "      --max-tokens N      generated tokens at most (default 4096)\n"
    "      --temperature T     0 is greedy (default 0.6)\n"
    "      --top-p P           nucleus sampling (default 0.95; 1 is off)\n"
    "      --top-k K           keep the K most likely (default 0, off)\n"
    "      --min-p P           drop below P x the most likely (default 0, off)\n"
    "      --repeat-penalty R  penalise the last 64 tokens (default 1, off)\n"
    "      --seed N            base seed: a request without \"seed\" uses N + its line\n"
    "                          number (default 0)\n"
    "      --system TEXT       system prompt for conversations that have none\n"
    "      --no-think          skip the reasoning block (R1); prompt mode: no reasoning on stderr\n"
    "      --template NAME     v3, r1 or raw (default: the model's own)\n"
    "      --ctx N             tokens per sequence (default: the model's, capped by memory)\n"
    "      --spec-draft N      MTP draft tokens per step: -1 adaptive (default), 0 off, 1..8\n"
    "      --threads N         CPU threads (default: one per physical core)\n"
    "      --backend NAME      auto, cpu, cuda or hip (default auto)\n"
    "      --preload           read the weights into memory first, with progress (default on\n"
    "                          a terminal when the file is not yet in the page cache)\n"
    "      --no-preload        do not (pages are then read on first use)\n"
    "      --mlock             preload and lock the weights in memory\n"
    "      --no-prefix-cache   compute every prompt in full (default: prompts share the KV\n"
    "                          cache of a common prefix, e.g. a system prompt)\n"
    "  -h, --help              this help\n"
    "\n"
    "Request fields override: max_tokens, temperature, top_p, top_k, min_p,\n"
    "repetition_penalty, seed, stop (string or array). See dsr1-run(1).\n";

typedef struct run_args {
    dsr1_run_opts o;
    const char *model, *template_name, *backend, *prompt;
    int no_think;
    dsr1_gen_flags gen;      /* ctx, threads, spec_draft; sampling/max_tokens go to o.defaults */
} run_args;

enum { O_IN = 256, O_OUT, O_RESUME, O_UNORDERED, O_SYSTEM, O_NOTHINK, O_TEMPLATE, O_BACKEND };

static const struct option longopts[] = {
    {"model", required_argument, 0, 'm'},      {"in", required_argument, 0, O_IN},
    {"out", required_argument, 0, O_OUT},      {"resume", no_argument, 0, O_RESUME},
    {"unordered", no_argument, 0, O_UNORDERED}, {"parallel", required_argument, 0, 'j'},
    {"quiet", no_argument, 0, 'q'},            {"system", required_argument, 0, O_SYSTEM},
    {"no-think", no_argument, 0, O_NOTHINK},   {"template", required_argument, 0, O_TEMPLATE},
    {"backend", required_argument, 0, O_BACKEND}, {"help", no_argument, 0, 'h'},
    DSR1_GEN_LONGOPTS,                         {0, 0, 0, 0}};

/* 0 ok, 1 help printed (exit 0), 2 usage error. */
static int parse_args(run_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    dsr1_run_defaults_init(&a->o.defaults);
    a->o.parallel = 8;
    a->gen = (dsr1_gen_flags){.sampling = &a->o.defaults.sampling,
                              .max_tokens = &a->o.defaults.max_tokens, .spec_draft = -1};
    a->o.out = "-";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:j:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case O_IN: a->o.in = optarg; break;
        case O_OUT: a->o.out = optarg; break;
        case O_RESUME: a->o.resume = 1; break;
        case O_UNORDERED: a->o.unordered = 1; break;
        case 'q': a->o.quiet = 1; break;
        case O_SYSTEM: a->o.defaults.system = optarg; break;
        case O_NOTHINK: a->no_think = 1; break;
        case O_TEMPLATE: a->template_name = optarg; break;
        case O_BACKEND: a->backend = optarg; break;
        case 'h': fputs(usage_text, stdout); return 1;
        case 'j': {
            double x;
            if (dsr1_common_opt_num("run", "--parallel", optarg, 1, 4096, 1, &x)) return 2;
            a->o.parallel = (int)x;
            break;
        }
        case '?': return dsr1_cli_usage("run", "bad option");
        default: if (dsr1_common_gen_flag("run", &a->gen, c, optarg)) return 2;
        }
    }
    if (optind < argc) a->prompt = argv[optind++];
    if (optind < argc) return dsr1_cli_usage("run", "unexpected argument '%s'", argv[optind]);
    if (!a->o.in && !a->prompt) return dsr1_cli_usage("run", "give --in FILE or a prompt");
    if (a->o.in && a->prompt) return dsr1_cli_usage("run", "give --in FILE or a prompt, not both");
    if (a->o.resume && !a->o.in) return dsr1_cli_usage("run", "--resume needs --in and --out");
    return 0;
}

/* ---- prompt mode -------------------------------------------------------- */

typedef struct prompt_sink {
    int show_reasoning, color, in_reasoning, answer_nl;
} prompt_sink;

static void prompt_piece(void *ctx, dsr1_gen_kind kind, const char *text, size_t len)
{
    prompt_sink *p = ctx;
    if (kind == DSR1_GEN_REASONING && p->show_reasoning) {
        if (!p->in_reasoning && p->color) fputs("\033[2m", stderr);
        p->in_reasoning = 1;
        fwrite(text, 1, len, stderr);
    } else if (kind == DSR1_GEN_THINK_END || kind == DSR1_GEN_ANSWER) {
        if (p->in_reasoning) {
            fputs(p->color ? "\033[0m\n" : "\n", stderr);
            p->in_reasoning = 0;
        }
        if (kind == DSR1_GEN_ANSWER && len) {
            fwrite(text, 1, len, stdout);
            p->answer_nl = text[len - 1] == '\n';
        }
    }
    fflush(stdout);
    fflush(stderr);
}

/* The prompt as a one-turn chat (plus --system). */
static int prompt_chat(const run_args *a, const char *text, dsr1_chat **chat, dsr1_error *err)
{
    cJSON *root = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(root, "messages");
    if (a->o.defaults.system) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "role", "system");
        cJSON_AddStringToObject(s, "content", a->o.defaults.system);
        cJSON_AddItemToArray(msgs, s);
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", text);
    cJSON_AddItemToArray(msgs, u);
    int rc = dsr1_chat_from_json(chat, root, err);
    cJSON_Delete(root);
    return rc;
}

static int prompt_loop(dsr1_engine *e, dsr1_gen *g, int seq, dsr1_finish *fin, dsr1_error *err)
{
    dsr1_event *ev = calloc(dsr1_engine_max_events(e), sizeof *ev);
    if (!ev) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    int rc = 0;
    *fin = DSR1_FINISH_NONE;
    while (!rc && *fin == DSR1_FINISH_NONE) {
        if (interrupted) {
            dsr1_engine_cancel(e, seq);
            rc = dsr1_errorf(err, DSR1_EINTR, "interrupted");
            break;
        }
        size_t n = 0;
        rc = dsr1_engine_step(e, ev, &n, err);
        for (size_t i = 0; !rc && i < n; i++) {
            if (ev[i].seq != seq) continue;
            if (ev[i].token >= 0 && dsr1_gen_push(g, ev[i].token, err) < 0) rc = DSR1_ENOMEM;
            if (ev[i].finish == DSR1_FINISH_ERROR)
                rc = dsr1_errorf(err, DSR1_EIO, "generation failed: %s",
                                 ev[i].message ? ev[i].message : "engine error");
            if (ev[i].finish) *fin = ev[i].finish;
        }
    }
    free(ev);
    return rc ? rc : dsr1_gen_finish(g, err);
}

static int prompt_mode(run_args *a, dsr1_model *m, dsr1_engine *e, dsr1_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (!strcmp(a->prompt, "-"))
        DSR1_TRY(dsr1_common_read_all("-", &text, &len, err));
    else if (!(text = strdup(a->prompt)))
        return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    dsr1_chat *chat = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int forced = 0, seq = -1;
    prompt_sink ps = {!a->no_think, dsr1_common_use_color(2, 0), 0, 1};
    dsr1_gen g = {0};
    int rc = prompt_chat(a, text, &chat, err);
    if (!rc)
        rc = dsr1_gen_prompt(dsr1_model_tokenizer(m), &a->o.prompt, chat, NULL, &ids, &n,
                             &forced, err);
    if (!rc) rc = dsr1_gen_init(&g, dsr1_model_tokenizer(m), dsr1_model_config(m)->eos_token_id,
                                forced, NULL, 0, prompt_piece, &ps, err);
    if (!rc) {
        dsr1_request q = {0};
        q.prompt = ids;
        q.n_prompt = n;
        q.max_tokens = a->o.defaults.max_tokens;
        q.sampling = a->o.defaults.sampling;
        q.sampling.seed += 1; /* as line 1 of a batch: same seed, same answer */
        q.reuse_seq = -1;
        rc = dsr1_engine_submit(e, &q, &seq, err);
    }
    dsr1_finish fin = DSR1_FINISH_NONE;
    if (!rc) rc = prompt_loop(e, &g, seq, &fin, err);
    if (!ps.answer_nl) fputc('\n', stdout);
    if (ps.in_reasoning && ps.color) fputs("\033[0m", stderr);
    if (!rc && fin == DSR1_FINISH_LENGTH && !a->o.quiet)
        fprintf(stderr, "dsr1: stopped at --max-tokens %d\n", a->o.defaults.max_tokens);
    dsr1_gen_free(&g);
    free(ids);
    dsr1_chat_free(chat);
    free(text);
    return rc;
}

/* ---- entry ------------------------------------------------------------ */

static int open_all(run_args *a, dsr1_model **m, dsr1_engine **e, dsr1_error *err)
{
    char path[4096], warn[256];
    DSR1_TRY(dsr1_common_model_path(a->model, path, sizeof path, err));
    DSR1_TRY(dsr1_common_open_checked(m, path, a->backend, &a->gen, a->prompt ? 1 : a->o.parallel,
                                      a->prompt ? NULL : "--parallel", a->o.quiet, err));
    if (!dsr1_model_tokenizer(*m))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: the model file has no tokenizer", path);
    DSR1_TRY(dsr1_gen_prompt_opts(&a->o.prompt, *m, a->template_name, a->no_think, warn,
                                  sizeof warn, err));
    if (warn[0] && !a->o.quiet) fprintf(stderr, "dsr1: %s\n", warn);
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = a->prompt ? 1 : a->o.parallel;
    if (a->gen.ctx) eo.ctx = a->gen.ctx;
    eo.spec_draft = a->gen.spec_draft;
    eo.prefix_cache = !a->gen.no_prefix_cache;
    return dsr1_engine_create(e, *m, &eo, err);
}

int dsr1_cmd_run(int argc, char **argv)
{
    run_args a;
    int u = parse_args(&a, argc, argv);
    if (u) return u == 1 ? 0 : 2;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    dsr1_error err = {0};
    dsr1_model *m = NULL;
    dsr1_engine *e = NULL;
    long failed = 0;
    int rc = open_all(&a, &m, &e, &err);
    if (!rc && a.prompt) rc = prompt_mode(&a, m, e, &err);
    if (!rc && !a.prompt) rc = dsr1_run_batch(m, e, &a.o, &interrupted, &failed, &err);
    dsr1_engine_free(e);
    dsr1_model_close(m);
    if (rc == DSR1_EINTR && !a.prompt)
        dsr1_errorf(&err, DSR1_EINTR,
                    "interrupted; finished records are in %s (rerun with --resume)", a.o.out);
    if (rc) return dsr1_cli_fail(&err);
    return failed ? 1 : 0;
}
