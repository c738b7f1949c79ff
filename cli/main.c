/*
 * main.c - entry point: picks the subcommand and hands over argv.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} commands[] = {
    {"chat", dsr1_cmd_chat, "talk to the model in the terminal (or one turn from stdin)"},
    {"run", dsr1_cmd_run, "answer a prompt, or a JSONL batch of requests"},
    {"pull", dsr1_cmd_pull, "download a model from the Hugging Face Hub (resumable, verified)"},
    {"convert", dsr1_cmd_convert, "pack a Hugging Face checkpoint into one .dsr1 file"},
    {"info", dsr1_cmd_info, "describe a .dsr1 file, a checkpoint, or this machine (--hw)"},
    {"tokenize", dsr1_cmd_tokenize, "text to token ids"},
    {"detokenize", dsr1_cmd_detokenize, "token ids to text"},
    {"template", dsr1_cmd_template, "render a conversation with the model's chat template"},
    {"logits", dsr1_cmd_logits, "write raw logits for given ids (for checking against references)"},
    {"eval", dsr1_cmd_eval, "compare a fast compute path with the float32 reference"},
    {"bench", dsr1_cmd_bench, "measure prefill, decode, speculative decoding, tokenizer speed"},
    {"verify", dsr1_cmd_verify, "check every hash a .dsr1 file stores (payloads included)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: dsr1 COMMAND [OPTIONS]   (dsr1 COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\n  version     print the version\n\nSee dsr1(1).\n");
}

/* Started with stdin, stdout or stderr closed (`<&-`), the first file we
 * open would take that number: `run --in -` would then read the model file
 * as JSONL, and payload or messages would land in a file we opened. Fill
 * each closed one with /dev/null first. */
static void open_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) != -1) continue;
        int n = open("/dev/null", fd ? O_WRONLY : O_RDONLY);
        if (n >= 0 && n != fd) close(n); /* cannot happen: lower ones are open by now */
    }
}

int main(int argc, char **argv)
{
    open_std_fds();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("dsr1 %s\n", DSR1_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dsr1: unknown command '%s' (see dsr1 --help)\n", cmd);
    return 2;
}
