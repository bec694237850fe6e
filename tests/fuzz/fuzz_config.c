/* fuzz_config.c - libFuzzer target: config-file parsing and lookup (cli/lookup.c), what a
 * consumer runs on a file it did not write. */
#include <stddef.h>
#include <stdint.h>

#include "lookup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    moetune_lookup_t *t = NULL;
    if (moetune_lookup_parse((const char *)data, size, &t, err, sizeof err) == 0) {
        moetune_lookup_config_t cfg;
        uint32_t key;
        static const uint32_t probes[] = {0, 1, 3, 64, 100, 4096, 1u << 31, UINT32_MAX};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
            (void)moetune_lookup_get(t, probes[i], &cfg, &key);
        moetune_lookup_free(&t);
    }
    return 0;
}
