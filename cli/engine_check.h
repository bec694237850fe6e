/*
 * engine_check.h - ask an engine's own config lookup which file it reads.
 *
 * moetune names engine files by its own rules (export.h "With an engine"). Where the engine
 * imports in a Python interpreter, its own functions are asked instead, through the triton
 * helper's probe (worker/HELPER.md "Probe", --names): get_config_file_name for the file name
 * of a shape on a device (SGLang also its _down name), and, for the running device, a traced
 * get_moe_configs: the paths it tried and the one it read (the fallback when that is not the
 * first; none: its built-in defaults). docs/engines.md says what each engine version does.
 *
 * Used by doctor (the engine's answer beside moetune's), by export --engine, which refuses
 * a file whose name the engine would not look for, and by tune, which also takes the engine's
 * config folder from the probe for the ship guard's incumbent (shipguard.h). Where the engine does not import, nothing
 * is checked and moetune's rules stand.
 */
#ifndef CLI_ENGINE_CHECK_H
#define CLI_ENGINE_CHECK_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "export_layout.h"
#include "mt.h"
#include "space.h"

/* The engine's answer for one shape. Strings are "" when the engine did not say. */
typedef struct {
    char file[400];        /* get_config_file_name's name */
    char down_file[420];   /* SGLang's _down name; "" where the engine has none */
    char first[PATH_MAX];  /* the first path its lookup tried: the file for the running Triton */
    char loaded[PATH_MAX]; /* the path it read; "" = no file, built-in defaults */
    char error[400];       /* why this shape got no answer */
    unsigned n_entries;    /* batch sizes in what it read */
    bool traced;           /* the lookup ran (first, loaded, n_entries are its answer) */
} eng_answer_t;

/* The engine's own answers for a list of shapes. */
typedef struct {
    bool asked;           /* the engine's lookup imported and answered */
    char version[64];     /* the engine's version, as the probe reports it (also when not asked) */
    char device[128];     /* the GPU the interpreter sees ("" when none) */
    char module[256];     /* the module of get_config_file_name */
    char why[700];        /* when not asked: why (one line) */
    eng_answer_t *answers; /* one per shape asked, in order; NULL when not asked */
    size_t n;
    char triton[32];           /* the probe's Triton version */
    char config_dir[PATH_MAX]; /* the engine's config folder (its package's), "" when none */
    char engine_error[512];    /* why the engine was not found, "" when it was */
} eng_own_t;

/* The interpreter export asks: $MOETUNE_PYTHON when set, else "python3". */
const char *eng_python(void);

/* Runs the helper's probe in python for engine with one query per shape: devices[i] is the
 * device name to ask for (NULL: the running GPU), and lookup traces get_moe_configs too.
 * Fills own (caller frees with eng_own_clear). Returns MT_OK also when the engine is not
 * importable (own->asked false, own->why says why); MT_NOMEM. */
mt_status_t eng_ask(const char *python, exp_engine_t engine, const char *const *devices, const krn_shape_t *shapes,
                    size_t n, bool lookup, eng_own_t *own);

/* Frees own's answers and zeroes it. */
void eng_own_clear(eng_own_t *own);

/* Checks the file names an engine export is about to write: names[i] (and its _down name for
 * SGLang) against the engine's own function for shapes[i] on devices[i], asked in eng_python().
 * MT_OK when every name agrees (a line saying so goes to note, when not NULL) or the engine
 * cannot be asked (nothing is said: moetune's rules stand); MT_INVAL with one line naming both
 * names when one disagrees; MT_NOMEM. */
mt_status_t eng_check_names(exp_engine_t engine, const char *const *devices, const krn_shape_t *shapes,
                            const char *const *names, size_t n, FILE *note, char *err, size_t errlen);

/* Before a sweep for engines ("sglang", "vllm" or "sglang,vllm"), each engine in python is
 * asked for spec's shapes on the GPU it sees; with check (the triton backend), its own names
 * against moetune's, so that a sweep whose files the engine would not read is refused before
 * it starts. kept[0] gets SGLang's answer, kept[1] vLLM's (zeroed when not asked), for the
 * caller to clear with eng_own_clear. MT_OK when the names agree, are not
 * checked or the engine cannot be asked; MT_INVAL with one line naming both; MT_NOMEM. */
struct Moetune__SweepSpec;
mt_status_t eng_check_spec(const char *python, const char *engines, const struct Moetune__SweepSpec *spec, bool check,
                           eng_own_t kept[2], char *err, size_t errlen);

#endif
