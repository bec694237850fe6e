/* fuzz_spec.c - libFuzzer target: sweep spec JSON parsing and assembly (cli/spec.c), the
 * path `moetune submit --spec FILE` takes, and Hugging Face config.json parsing (cli/presets.c). */
#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "presets.h"
#include "space.h"
#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    cli_spec_t *spec = cli_spec_new();
    if (!spec) return 0;
    if (cli_spec_parse_json(spec, (const char *)data, size, err, sizeof err) == MT_OK)
        (void)cli_spec_finish(spec, true, err, sizeof err);
    cli_spec_destroy(&spec);
    krn_shape_t shape;
    (void)cli_model_config_parse((const char *)data, size, 1, 1, "bf16", &shape, err, sizeof err);
    return 0;
}
