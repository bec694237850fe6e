/*
 * engines.h - the serving engines moetune writes config files for (SGLang, vLLM), one table.
 *
 * The table is worker/helper/engines.json, which the triton helper reads too; CMake turns it
 * into KRN_ENGINES (krn_engines_gen.h, cmake/facts.cmake) at configure time. Code that names an
 * engine finds it here, so a name is checked in one place; what differs between engines' file
 * layouts stays with the code that writes them, keyed by the id.
 */
#ifndef KRN_ENGINES_H
#define KRN_ENGINES_H

#include <stdbool.h>
#include <stddef.h>

#include "krn_engines_gen.h"

typedef enum {
#define KRN_ENGINE_ID(id, name, display, env) KRN_ENGINE_##id,
    KRN_ENGINES(KRN_ENGINE_ID)
#undef KRN_ENGINE_ID
        KRN_ENGINE_COUNT
} krn_engine_id_t;

typedef struct {
    krn_engine_id_t id;
    const char *name;       /* "sglang": the --engine and --kernel word */
    const char *display;    /* "SGLang": how messages name it */
    const char *config_env; /* "SGLANG_MOE_CONFIG_DIR": points it at a folder of config files */
} krn_engine_t;

/* The engine called name; NULL when name is NULL or no engine's. */
const krn_engine_t *krn_engine_find(const char *name);

/* The engine of id (the default, krn_engine_get(0), is the table's first); id < KRN_ENGINE_COUNT. */
const krn_engine_t *krn_engine_get(krn_engine_id_t id);

/* Whether list is one engine's name or several, comma-separated, each once ("sglang,vllm"). */
bool krn_engines_valid(const char *list);

/* Whether name is one of the comma-separated names of list. */
bool krn_engines_has(const char *list, const char *name);

#endif
