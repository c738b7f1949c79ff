/*
 * main.c - entry point: picks the subcommand and hands over argv.
 */
#include <stdio.h>
#include <string.h>

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
};

static void usage(FILE *f)
{
    fprintf(f, "usage: dsr1 COMMAND [OPTIONS]   (dsr1 COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\n  version     print the version\n\nSee dsr1(1).\n");
}

int main(int argc, char **argv)
{
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
