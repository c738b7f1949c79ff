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
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    "       dsr1 run [OPTIONS] \"PROMPT\"       (or -p PROMPT)\n"
    "       dsr1 run [OPTIONS] -            (the prompt is read from stdin)\n"
    "\n"
    "Batch: one request per line, {\"id\":..., \"messages\":[...]} or\n"
    "{\"id\":..., \"prompt\":\"...\"}, or OpenAI's batch-file shape\n"
    "{\"custom_id\":..., \"method\":\"POST\", \"url\":..., \"body\":{...}}; one result per\n"
    "line, in OpenAI's batch-output shape for OpenAI input, else flat records.\n"
    "Prompt: the answer goes to stdout, the reasoning to stderr; with --out FILE\n"
    "the answer is written there as one record instead.\n"
    "\n"
    "  -m, --model FILE        model file (default: $DSR1_MODEL, then the data directory)\n"
    "      --in FILE           requests (JSONL; - is stdin; zstd input is detected;\n"
    "                          pipes and FIFOs are streamed)\n"
    "      --out FILE          results (JSONL; - is stdout, the default; *.zst is compressed)\n"
    "      --resume            skip requests whose id is already in --out, append the rest\n"
    "      --overwrite         replace an existing --out (else it is refused)\n"
    "      --format F          output shape: auto (default: as the input), openai or flat\n"
    "      --strict            an unknown request field is an error record, not a warning\n"
    "      --max-line-bytes N  longer request lines get an error record (default 16777216)\n"
    "      --unordered         write each result when it finishes, not in input order\n"
    "  -j, --parallel N        sequences in flight at once (default 8)\n"
    "  -q, --quiet             no progress or summary on stderr\n"
    "  -n, --max-tokens N      generated tokens at most (default 4096)\n"
    "      --temperature T     0 is greedy (default 0.6)\n"
    "      --top-p P           nucleus sampling (default 0.95; 1 is off)\n"
    "      --top-k K           keep the K most likely (default 0, off)\n"
    "      --min-p P           drop below P x the most likely (default 0, off)\n"
    "      --repetition-penalty R  penalise the last 64 tokens (default 1, off)\n"
    "      --presence-penalty X    OpenAI's, in [-2, 2] (default 0, off)\n"
    "      --frequency-penalty X   OpenAI's, in [-2, 2] (default 0, off)\n"
    "  -s, --seed N            base seed: a request without \"seed\" uses N + its line\n"
    "                          number (default 0)\n"
    "      --stop TEXT         stop string for requests without \"stop\" (repeatable)\n"
    "      --system TEXT       system prompt for conversations that have none\n"
    "      --no-think          skip the reasoning block (R1); prompt mode: no reasoning on stderr\n"
    "      --template NAME     v3, r1 or raw (default: the model's own)\n"
    "  -c, --ctx N             tokens per sequence (default: the model's, capped by memory)\n"
    "      --spec-draft N      MTP draft tokens per step: -1 adaptive (default), 0 off, 1..8\n"
    "      --prefill-chunk N   prompt tokens per step (default 512; for many experts up to\n"
    "                          2048, so each expert sees ~64 of them: R1 2048)\n"
    "      --kv-type T         KV cache bf16 (default) or fp8 (half the bytes, a little less exact)\n"
    "      --verify            check every tensor's hash before loading (reads the whole file)\n"
    DSR1_HELP_COMPUTE_MODES
    "  -t, --threads N         CPU threads (default: one per physical core)\n"
    "      --numa MODE         auto (the machine's NUMA nodes), off, or virtual:N (test split)\n"
    "      --backend NAME      auto, cpu, cuda or hip (default auto)\n"
    "      --preload           read the weights into memory first, with progress (default on\n"
    "                          a terminal when the file is not yet in the page cache)\n"
    "      --no-preload        do not (pages are then read on first use)\n"
    "      --mlock             preload and lock the weights in memory\n"
    "      --no-prefix-cache   compute every prompt in full (default: prompts share the KV\n"
    "                          cache of a common prefix, e.g. a system prompt)\n"
    "  -h, --help              this help\n"
    "\n"
    "llama.cpp spellings are accepted: --temp, --ctx-size, --n-predict, --predict,\n"
    "--repeat-penalty, "
    "-sys/--system-prompt, -p/--prompt.\n"
    "Request fields: max_tokens (max_completion_tokens), temperature, top_p, top_k,\n"
    "min_p, repetition_penalty, presence_penalty, frequency_penalty, seed, stop (string\n"
    "or array), stop_token_ids, n, logprobs, top_logprobs, model. See dsr1-run(1).\n";

#define MAX_STOPS 16

typedef struct run_args {
    dsr1_run_opts o;
    const char *model, *template_name, *backend, *prompt;
    int no_think;
    char *stops[MAX_STOPS];  /* --stop, borrowed from argv */
    char *line;              /* prompt mode with --out: the request line (owned) */
    dsr1_gen_flags gen;      /* ctx, threads, spec_draft; sampling/max_tokens go to o.defaults */
} run_args;

enum { O_IN = 256, O_OUT, O_RESUME, O_UNORDERED, O_SYSTEM, O_NOTHINK, O_TEMPLATE, O_BACKEND,
       O_FORMAT, O_STRICT, O_OVERWRITE, O_MAXLINE, O_STOP };

static const struct option longopts[] = {
    {"model", required_argument, 0, 'm'},      {"in", required_argument, 0, O_IN},
    {"out", required_argument, 0, O_OUT},      {"resume", no_argument, 0, O_RESUME},
    {"unordered", no_argument, 0, O_UNORDERED}, {"parallel", required_argument, 0, 'j'},
    {"quiet", no_argument, 0, 'q'},            {"system", required_argument, 0, O_SYSTEM},
    {"system-prompt", required_argument, 0, O_SYSTEM},
    {"no-think", no_argument, 0, O_NOTHINK},   {"template", required_argument, 0, O_TEMPLATE},
    {"backend", required_argument, 0, O_BACKEND}, {"help", no_argument, 0, 'h'},
    {"format", required_argument, 0, O_FORMAT}, {"strict", no_argument, 0, O_STRICT},
    {"overwrite", no_argument, 0, O_OVERWRITE}, {"max-line-bytes", required_argument, 0, O_MAXLINE},
    {"stop", required_argument, 0, O_STOP},    {"prompt", required_argument, 0, 'p'},
    DSR1_GEN_LONGOPTS,                         {0, 0, 0, 0}};

/* An option getopt did not take: a missing value, or an unknown flag with
 * the known one it is probably a typo of. Returns 2. */
static int bad_option(int c, char **argv)
{
    const char *arg = argv[optind - 1];
    if (c == ':') return dsr1_cli_usage("run", "%s needs a value", arg);
    if (strncmp(arg, "--", 2)) return dsr1_cli_usage("run", "unknown option -%c", optopt);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    const char *cand[sizeof longopts / sizeof *longopts];
    size_t n = 0;
    for (const struct option *o = longopts; o->name; o++) cand[n++] = o->name;
    const char *near = dsr1_common_suggest(name, cand, n);
    const dsr1_setting *st = dsr1_common_setting(name);
    if (st) near = st->flag + 2;
    if (near) return dsr1_cli_usage("run", "unknown option --%s (did you mean --%s?)", name, near);
    return dsr1_cli_usage("run", "unknown option --%s", name);
}

/* Numbers for the run-only flags. */
static int run_flag(run_args *a, int c, const char *v)
{
    double x;
    switch (c) {
    case 'j':
        if (dsr1_common_opt_num("run", "--parallel", v, 1, 4096, 1, &x)) return 2;
        a->o.parallel = (int)x;
        return 0;
    case O_MAXLINE:
        if (dsr1_common_opt_num("run", "--max-line-bytes", v, 256, 1 << 30, 1, &x)) return 2;
        a->o.max_line_bytes = (size_t)x;
        return 0;
    case O_FORMAT:
        if (!strcmp(v, "auto")) a->o.format = DSR1_FORMAT_AUTO;
        else if (!strcmp(v, "openai")) a->o.format = DSR1_FORMAT_OPENAI;
        else if (!strcmp(v, "flat")) a->o.format = DSR1_FORMAT_FLAT;
        else return dsr1_cli_usage("run", "--format %s: expected auto, openai or flat", v);
        return 0;
    case O_STOP:
        if (a->o.defaults.n_stop == MAX_STOPS)
            return dsr1_cli_usage("run", "--stop: at most %d", MAX_STOPS);
        a->stops[a->o.defaults.n_stop++] = (char *)v;
        return 0;
    case O_BACKEND:
        if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "hip"))
            return dsr1_cli_usage("run", "--backend %s: expected auto, cpu, cuda or hip", v);
        a->backend = v;
        return 0;
    }
    return dsr1_common_gen_flag("run", &a->gen, c, v) ? 2 : 0;
}

static int take_option(run_args *a, int c, char **argv)
{
    switch (c) {
    case 'm': a->model = optarg; break;
    case O_IN: a->o.in = optarg; break;
    case O_OUT: a->o.out = optarg; break;
    case O_RESUME: a->o.resume = 1; break;
    case O_UNORDERED: a->o.unordered = 1; break;
    case O_OVERWRITE: a->o.overwrite = 1; break;
    case O_STRICT: a->o.defaults.strict = 1; break;
    case 'q': a->o.quiet = 1; break;
    case O_SYSTEM: a->o.defaults.system = optarg; break;
    case O_NOTHINK: a->no_think = 1; break;
    case O_TEMPLATE: a->template_name = optarg; break;
    case 'p':
        if (a->prompt) return dsr1_cli_usage("run", "more than one prompt");
        a->prompt = optarg;
        break;
    case 'n': return run_flag(a, DSR1_GEN_MAXTOK, optarg);
    case 'c': return run_flag(a, DSR1_GEN_CTX, optarg);
    case 't': return run_flag(a, DSR1_GEN_THREADS, optarg);
    case 's': return run_flag(a, DSR1_GEN_SEED, optarg);
    case '?': case ':': return bad_option(c, argv);
    default: return run_flag(a, c, optarg);
    }
    return 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* Positional arguments and combinations. */
static int check_args(run_args *a, int argc, char **argv)
{
    if (optind < argc) {
        if (a->prompt) return dsr1_cli_usage("run", "unexpected argument '%s'", argv[optind]);
        a->prompt = argv[optind++];
    }
    if (optind < argc) return dsr1_cli_usage("run", "unexpected argument '%s' (quote the "
                                             "prompt as one argument)", argv[optind]);
    struct stat st;
    if (a->prompt && !a->o.in && (ends_with(a->prompt, ".jsonl") || ends_with(a->prompt, ".jsonl.zst")) &&
        stat(a->prompt, &st) == 0)
        return dsr1_cli_usage("run", "'%s' is a file; did you mean --in %s?", a->prompt, a->prompt);
    if (!a->o.in && !a->prompt) return dsr1_cli_usage("run", "give --in FILE or a prompt");
    if (a->o.in && a->prompt) return dsr1_cli_usage("run", "give --in FILE or a prompt, not both");
    if (a->o.resume && !a->o.in) return dsr1_cli_usage("run", "--resume needs --in and --out");
    if (a->template_name && dsr1_template_parse_name(a->template_name) < 0)
        return dsr1_cli_usage("run", "--template %s: expected v3, r1 or raw", a->template_name);
    return 0;
}

/* llama.cpp's one-dash long flag: -sys is --system-prompt. */
static void normalise(int argc, char **argv, char **out)
{
    static char sys[] = "--system-prompt";
    for (int i = 0; i < argc; i++) out[i] = !strcmp(argv[i], "-sys") ? sys : argv[i];
    out[argc] = NULL;
}

/* 0 ok, 1 help printed (exit 0), 2 usage error. */
static int parse_args(run_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    dsr1_run_defaults_init(&a->o.defaults);
    a->o.parallel = 8;
    a->o.max_line_bytes = 16u << 20;
    a->o.defaults.stop = a->stops;
    a->gen = (dsr1_gen_flags){.sampling = &a->o.defaults.sampling,
                              .max_tokens = &a->o.defaults.max_tokens, .spec_draft = -1};
    a->o.out = "-";
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:j:qhn:c:t:s:p:", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return 1;
        }
        if (take_option(a, c, argv)) return 2;
    }
    return check_args(a, argc, argv) ? 2 : 0;
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
            int pushed = ev[i].token >= 0 ? dsr1_gen_push(g, ev[i].token, err) : 0;
            if (pushed < 0) rc = DSR1_ENOMEM;
            if (pushed == 1) { /* a --stop string: the answer ends here */
                dsr1_engine_cancel(e, seq);
                *fin = DSR1_FINISH_STOP;
                break;
            }
            if (ev[i].finish == DSR1_FINISH_ERROR)
                rc = dsr1_errorf(err, DSR1_EIO, "generation failed: %s",
                                 ev[i].message ? ev[i].message : "engine error");
            if (ev[i].finish) *fin = ev[i].finish;
        }
    }
    free(ev);
    return rc ? rc : dsr1_gen_finish(g, err);
}

/* The prompt text: argv's, or all of stdin for "-". A NUL byte would cut
 * the prompt short without a word: refused, naming where. */
static int prompt_text(const run_args *a, char **text, dsr1_error *err)
{
    size_t len = 0;
    if (strcmp(a->prompt, "-")) {
        *text = strdup(a->prompt);
        return *text ? 0 : dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    }
    DSR1_TRY(dsr1_common_read_all("-", text, &len, err));
    const char *nul = memchr(*text, 0, len);
    if (nul) {
        long at = (long)(nul - *text);
        free(*text);
        *text = NULL;
        return dsr1_errorf(err, DSR1_EINVAL, "<stdin>: a NUL byte at offset %ld; the prompt "
                           "must be text", at);
    }
    return 0;
}

static int prompt_mode(run_args *a, const char *text, dsr1_model *m, dsr1_engine *e,
                       dsr1_error *err)
{
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
                                forced, a->stops, a->o.defaults.n_stop, prompt_piece, &ps, err);
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
    /* The answer is the payload: if it did not reach stdout (a full disk,
     * a closed file), that is a failure, not exit 0. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e2 = errno;
        if (!rc) rc = dsr1_errorf(err, DSR1_EIO, "<stdout>: write: %s", strerror(e2 ? e2 : EIO));
    }
    dsr1_gen_free(&g);
    free(ids);
    dsr1_chat_free(chat);
    return rc;
}

/* Prompt mode with --out FILE: the prompt as one request line. */
static int prompt_line(run_args *a, const char *text, dsr1_error *err)
{
    cJSON *root = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(root, "messages");
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", text);
    cJSON_AddItemToArray(msgs, u);
    a->line = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!a->line) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    a->o.in_text = a->line;
    return 0;
}

/* ---- entry ------------------------------------------------------------ */

static int open_all(run_args *a, dsr1_model **m, dsr1_engine **e, char *name, size_t cap,
                    dsr1_error *err)
{
    char path[4096], warn[256];
    DSR1_TRY(dsr1_common_model_path(a->model, path, sizeof path, err));
    const char *base = strrchr(path, '/');
    snprintf(name, cap, "%s", base ? base + 1 : path);
    if (ends_with(name, ".dsr1")) name[strlen(name) - 5] = 0;
    a->o.model_name = name;
    int seqs = a->prompt && !a->o.in_text ? 1 : a->o.parallel;
    DSR1_TRY(dsr1_common_open_checked(m, path, a->backend, &a->gen, seqs,
                                      seqs == 1 ? NULL : "--parallel", a->o.quiet, err));
    if (!dsr1_model_tokenizer(*m))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: the model file has no tokenizer", path);
    DSR1_TRY(dsr1_gen_prompt_opts(&a->o.prompt, *m, a->template_name, a->no_think, warn,
                                  sizeof warn, err));
    if (warn[0] && !a->o.quiet) fprintf(stderr, "dsr1: %s\n", warn);
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = a->prompt && !a->o.in_text ? 1 : a->o.parallel;
    if (a->gen.ctx) eo.ctx = a->gen.ctx;
    eo.spec_draft = a->gen.spec_draft;
    eo.prefill_chunk = a->gen.prefill_chunk;
    if (a->gen.kv_fp8) eo.kv_type = DSR1_KV_FP8;
    eo.prefix_cache = !a->gen.no_prefix_cache;
    return dsr1_engine_create(e, *m, &eo, err);
}

/* Everything that can be known before the model loads. 0, 1 (runtime
 * error, printed) or 2 (usage, printed). */
static int prepare(run_args *a, char **text, dsr1_run_plan *plan)
{
    dsr1_error err = {0};
    if (a->prompt && prompt_text(a, text, &err)) return dsr1_cli_fail(&err);
    if (a->prompt && strcmp(a->o.out, "-") && prompt_line(a, *text, &err))
        return dsr1_cli_fail(&err);
    if (!a->prompt || a->o.in_text) {
        if (dsr1_run_check_files(&a->o)) return 2;
        if (dsr1_run_plan_make(plan, &a->o, &err)) return dsr1_cli_fail(&err);
    }
    return 0;
}

int dsr1_cmd_run(int argc, char **argv)
{
    char **av = malloc(((size_t)argc + 1) * sizeof *av);
    if (!av) return 1;
    normalise(argc, argv, av);
    run_args a;
    int u = parse_args(&a, argc, av);
    char *text = NULL;
    dsr1_run_plan plan = {0};
    if (u == 1) u = -1; /* --help: exit 0 */
    else if (!u) u = prepare(&a, &text, &plan);
    if (u) {
        free(av);
        free(text);
        free(a.line);
        dsr1_run_plan_free(&plan);
        return u < 0 ? 0 : u;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Over `ulimit -f` a write fails with EFBIG and says so; the default
     * SIGXFSZ would kill the run without a word. */
    signal(SIGXFSZ, SIG_IGN);
    dsr1_error err = {0};
    dsr1_model *m = NULL;
    dsr1_engine *e = NULL;
    long failed = 0;
    char name[256];
    int batch = !a.prompt || a.o.in_text;
    int rc = open_all(&a, &m, &e, name, sizeof name, &err);
    if (!rc && !batch) rc = prompt_mode(&a, text, m, e, &err);
    if (!rc && batch) rc = dsr1_run_batch(m, e, &a.o, &plan, &interrupted, &failed, &err);
    dsr1_engine_free(e);
    dsr1_model_close(m);
    if (rc == DSR1_EINTR && batch)
        dsr1_errorf(&err, DSR1_EINTR,
                    "interrupted; finished records are in %s (rerun with --resume)", a.o.out);
    dsr1_run_plan_free(&plan);
    free(text);
    free(a.line);
    free(av);
    if (rc) return dsr1_cli_fail(&err);
    return failed ? 1 : 0;
}
