/* rules_dump.c - prints, for one shape and one device's limits, every config of the default
 * space with Triton's static-rule verdict: "CONFIG,ok" or "CONFIG,reject,FLOOR" (bytes).
 *   rules_dump SHAPE SMEM_PER_BLOCK CC_MAJOR CC_MINOR      (SHAPE as --shape takes it) */
#include <stdio.h>
#include <stdlib.h>

#include "mt.h"
#include "space.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: rules_dump SHAPE SMEM_PER_BLOCK CC_MAJOR CC_MINOR\n");
        return 2;
    }
    krn_shape_t shape;
    char err[256], why[256], text[KRN_CONFIG_TEXT_LEN];
    if (krn_shape_parse(argv[1], &shape, err, sizeof err) != MT_OK) {
        fprintf(stderr, "rules_dump: %s\n", err);
        return 2;
    }
    krn_limits_t lim;
    krn_limits_default(&lim);
    lim.smem_per_block = (uint32_t)strtoul(argv[2], NULL, 10);
    lim.cc_major = (uint32_t)strtoul(argv[3], NULL, 10);
    lim.cc_minor = (uint32_t)strtoul(argv[4], NULL, 10);
    krn_space_t space;
    krn_space_default(&space);
    for (size_t i = 0; i < krn_space_size(&space); i++) {
        krn_config_t c;
        krn_space_at(&space, i, &c);
        krn_config_format(&c, text, sizeof text);
        if (krn_check_triton_on(&shape, &c, &lim, why, sizeof why) == MT_OK)
            printf("%s,ok\n", text);
        else
            printf("%s,reject,%u\n", text, krn_triton_smem_floor(&shape, &c, &lim));
    }
    return 0;
}
