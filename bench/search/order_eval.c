/* order_eval.c - the cost model's estimates and order for configs read from stdin, for
 * order_eval.py (bench/search/order_eval.sh builds it).
 *   order_eval cost E N K TOPK   stdin: "BM BN BK GM W S M" lines; stdout: the same + the estimate (us)
 *   order_eval order E N K TOPK  stdin: "BM BN BK GM W S" lines; stdout: them in the planner's order
 *                                for the 18 default batch sizes */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"

int main(int argc, char **argv) {
    if (argc != 6 || (strcmp(argv[1], "cost") && strcmp(argv[1], "order"))) {
        fprintf(stderr, "usage: order_eval cost|order E N K TOPK < configs\n");
        return 2;
    }
    krn_shape_t s;
    memset(&s, 0, sizeof s);
    s.e = (uint32_t)atoi(argv[2]), s.n = (uint32_t)atoi(argv[3]), s.k = (uint32_t)atoi(argv[4]);
    s.topk = (uint32_t)atoi(argv[5]);
    strcpy(s.dtype, "bf16");
    unsigned bm, bn, bk, g, w, st, m;
    if (strcmp(argv[1], "cost") == 0) {
        while (scanf("%u %u %u %u %u %u %u", &bm, &bn, &bk, &g, &w, &st, &m) == 7) {
            krn_config_t c = {.block_m = bm, .block_n = bn, .block_k = bk, .group_m = g, .num_warps = w, .num_stages = st};
            printf("%u %u %u %u %u %u %u %.4f\n", bm, bn, bk, g, w, st, m, ord_cost_us(&s, &c, m));
        }
        return 0;
    }
    static const uint32_t bs[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096};
    size_t n = 0, cap = 4096;
    krn_config_t *v = malloc(cap * sizeof *v);
    while (v && scanf("%u %u %u %u %u %u", &bm, &bn, &bk, &g, &w, &st) == 6) {
        if (n == cap && !(v = realloc(v, (cap *= 2) * sizeof *v))) break;
        v[n++] = (krn_config_t){.block_m = bm, .block_n = bn, .block_k = bk, .group_m = g, .num_warps = w, .num_stages = st};
    }
    if (!v || ord_configs(&s, bs, sizeof bs / sizeof bs[0], v, n) != MT_OK) {
        fprintf(stderr, "order_eval: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf("%u %u %u %u %u %u\n", v[i].block_m, v[i].block_n, v[i].block_k, v[i].group_m, v[i].num_warps,
               v[i].num_stages);
    free(v);
    return 0;
}
