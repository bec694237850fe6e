/*
 * presets.h - MoE model presets and Hugging Face config.json → kernel shapes.
 *
 * A shape for a deployment is E = experts / EP and N = moe intermediate size / TP
 * (the serving frameworks' file-name N), K = hidden size. Both divisions must be exact.
 */
#ifndef CLI_PRESETS_H
#define CLI_PRESETS_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "space.h"

typedef struct {
    const char *name;
    const char *alias; /* second accepted name, or NULL */
    uint32_t experts, topk, hidden, moe_intermediate;
    const char *dtype;                 /* the checkpoint's MoE weights: NULL = bf16, "fp8_w8a8" */
    uint32_t fp8_block_n, fp8_block_k; /* its fp8 weight-block scales (weight_block_size), 0 = none */
} cli_preset_t;

/* The preset table and its length (for help text and tests). */
extern const cli_preset_t cli_presets[];
extern const size_t cli_n_presets;

/* Finds a preset by name or alias (case-insensitive). NULL when unknown. */
const cli_preset_t *cli_preset_find(const char *name);

/* Fills shape for model dimensions at tensor parallel tp and expert parallel ep
 * (both >= 1) with dtype (NULL = "bf16"). MT_INVAL with a reason when tp does not
 * divide the intermediate size, ep does not divide the experts, or the shape fails
 * krn_shape_check. */
mt_status_t cli_preset_dims_shape(const char *what, uint32_t experts, uint32_t topk, uint32_t hidden,
                                  uint32_t moe_intermediate, uint32_t tp, uint32_t ep, const char *dtype,
                                  krn_shape_t *shape, char *err, size_t errlen);

/* Shape of the named preset at tp/ep. dtype NULL takes the dtype and block shape the
 * checkpoint ships (deepseek-v3: fp8_w8a8 with 128x128 blocks); "fp8_w8a8" takes the
 * checkpoint's fp8 blocks where it has them, else per-tensor scales; "bf16" is bf16.
 * MT_NOTFOUND with a reason listing the known presets when the name is unknown;
 * MT_INVAL as above. */
mt_status_t cli_preset_shape(const char *name, uint32_t tp, uint32_t ep, const char *dtype, krn_shape_t *shape,
                             char *err, size_t errlen);

/* Shape from the text of a Hugging Face config.json: experts from num_local_experts,
 * n_routed_experts or num_experts; top-k from num_experts_per_tok or experts_per_token;
 * intermediate from moe_intermediate_size, else intermediate_size; hidden_size. Fields
 * are looked up at the top level, then under text_config. A DeepSeek-style
 * quantization_config {quant_method "fp8"[, weight_block_size [n, k]]} gives dtype
 * fp8_w8a8 with that block shape (none: per-tensor scales); dtype "fp8_w8a8" keeps the
 * block shape, "bf16" drops it. A weight_block_size that is not two positive integers
 * is MT_INVAL, and so is any other quant_method (awq, gptq, mxfp4, ...) unless dtype is given. */
mt_status_t cli_model_config_parse(const char *text, size_t len, uint32_t tp, uint32_t ep, const char *dtype,
                                   krn_shape_t *shape, char *err, size_t errlen);

/* Same as cli_model_config_parse() on the file at path (MT_IO when unreadable). */
mt_status_t cli_model_config_load(const char *path, uint32_t tp, uint32_t ep, const char *dtype, krn_shape_t *shape,
                                  char *err, size_t errlen);

#endif
