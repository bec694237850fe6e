/* fuzz_routing.c - libFuzzer target: the routing .npy reader (kernels/routing.c), which reads
 * files users hand to --routing. A parsed file must hold tokens * topk ids, each <= max_id. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "routing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    krn_routing_t r;
    if (krn_routing_parse(data, size, &r, err, sizeof err) == 0) {
        for (size_t i = 0; i < (size_t)r.tokens * r.topk; i++)
            if (r.ids[i] > r.max_id) abort();
        if (r.tokens) {
            uint32_t rows[8];
            krn_routing_rows(r.tokens, 8, size, rows);
            for (int i = 0; i < 8; i++)
                if (rows[i] >= r.tokens) abort();
        }
        krn_routing_clear(&r);
    }
    return 0;
}
