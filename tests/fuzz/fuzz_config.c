/*
 * fuzz_config.c - config.json of a Hugging Face checkpoint
 * (dsr1_config_parse_hf) and the normalised config stored in .dsr1
 * metadata (dsr1_config_from_json), on the same input; an accepted config
 * is written back and must parse again.
 */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    dsr1_config c;
    dsr1_error err = {0};
    if (dsr1_config_parse_hf(&c, text, "config.json", &err) == 0) {
        char *back = dsr1_config_to_json(&c);
        dsr1_config c2;
        if (back && dsr1_config_from_json(&c2, back, "round trip", &err) != 0) abort();
        free(back);
    }
    memset(&c, 0, sizeof c);
    dsr1_config_from_json(&c, text, "metadata", &err);
    free(text);
    return 0;
}
