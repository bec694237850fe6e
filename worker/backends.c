/* backends.c - the table of backends built into this binary. See backend.h. */
#include <string.h>

#include "backend.h"
#include "sim.h"

#ifdef MT_HAVE_CUDA
extern const wrk_backend_ops_t wrk_backend_cuda;
#endif
extern const wrk_backend_ops_t wrk_backend_triton;

static const wrk_backend_ops_t *const g_backends[] = {
    &wrk_backend_sim,
#ifdef MT_HAVE_CUDA
    &wrk_backend_cuda,
#endif
    &wrk_backend_triton,
};
#define N_BACKENDS (sizeof g_backends / sizeof g_backends[0])

const wrk_backend_ops_t *wrk_backend_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(g_backends[i]->name, name) == 0) return g_backends[i];
    return NULL;
}

const char *wrk_backend_names(void) {
#ifdef MT_HAVE_CUDA
    return "sim,cuda,triton";
#else
    return "sim,triton";
#endif
}
