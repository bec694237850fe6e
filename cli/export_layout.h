/*
 * export_layout.h - how the engines name and read config files: the engine names, the
 * file name an engine looks for, a config as the files write it, and the versions text
 * a result records. Below export.c, compare.c and engine_check.c, which all use them;
 * the layouts themselves are described in export.h ("With an engine").
 */
#ifndef EXP_EXPORT_LAYOUT_H
#define EXP_EXPORT_LAYOUT_H

#include <stddef.h>

#include <jansson.h>

#include "mt.h"
#include "space.h"

typedef enum { EXP_ENGINE_NONE, EXP_ENGINE_SGLANG, EXP_ENGINE_VLLM } exp_engine_t;

/* Parses "sglang" / "vllm" into *engine; MT_INVAL for anything else. */
mt_status_t exp_engine_parse(const char *name, exp_engine_t *engine);

/* Name of an engine: "sglang", "vllm", or "" for EXP_ENGINE_NONE. */
const char *exp_engine_name(exp_engine_t engine);

/* The config file name an engine looks for (no folder): device as the engine's
 * torch.cuda.get_device_name() reports it, shape as stored. Written into buf. */
void exp_engine_file_name(exp_engine_t engine, const char *device_name, const krn_shape_t *shape, char *buf,
                          size_t len);

/* The value of key in a versions string ("kernel=sglang triton=3.6.0 ..."), or "", into buf. */
void exp_version_of(const char *versions, const char *key, char *buf, size_t len);

/* A config as the engines' files write it: {"BLOCK_SIZE_M": .., ..., "num_stages": ..} in
 * KRN_CONFIG_FIELDS order. New reference (NULL when out of memory). The text form is
 * krn_config_format's. */
json_t *exp_config_json(const krn_config_t *c);

#endif
