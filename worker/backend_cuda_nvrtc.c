/* backend_cuda_nvrtc.c - NVRTC compiles of the fused-MoE kernels and the on-disk image
 * cache. Needs no GPU. See backend_cuda.h. */
#include <errno.h>
#include <fcntl.h>
#include <nvrtc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "kernel_sources.h"
#include "mt.h"

void wcu_nvrtc_version(int *major, int *minor) {
    *major = *minor = 0;
    if (nvrtcVersion(major, minor) != NVRTC_SUCCESS) *major = *minor = 0;
}

static uint64_t sources_hash(void) {
    uint64_t h = mt_fnv1a(MT_FNV_INIT, krn_src_moe_gemm, strlen(krn_src_moe_gemm));
    return mt_fnv1a(h, krn_src_moe_common, strlen(krn_src_moe_common));
}

void wcu_kernel_hash(char *buf, size_t len) { mt_fmt(buf, len, "%016llx", (unsigned long long)sources_hash()); }

void wcu_default_cache_dir(char *buf, size_t len) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        mt_fmt(buf, len, "%s/moetune", xdg);
    else if (home && *home)
        mt_fmt(buf, len, "%s/.cache/moetune", home);
    else
        mt_fmt(buf, len, "/tmp/moetune-cache");
}

krn_config_t wcu_image_key(const krn_config_t *cfg) {
    krn_config_t k = *cfg;
    k.group_m = 1;
    return k;
}

void wcu_image_clear(wcu_image_t *img) {
    if (!img) return;
    free(img->cubin);
    memset(img, 0, sizeof *img);
}

/* Largest "Used N registers" and summed "N bytes spill stores/loads" of a ptxas -v log. */
static void parse_resources(const char *log, uint32_t *regs, uint32_t *spills) {
    *regs = *spills = 0;
    for (const char *p = log; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char line[512];
        if (n >= sizeof line) n = sizeof line - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        const char *u = strstr(line, "Used ");
        unsigned v, st, ld;
        if (u && sscanf(u, "Used %u registers", &v) == 1 && v > *regs) *regs = v;
        const char *sp = strstr(line, "bytes stack frame, ");
        if (sp && sscanf(sp, "bytes stack frame, %u bytes spill stores, %u bytes spill loads", &st, &ld) == 2)
            *spills += st + ld;
        p = nl ? nl + 1 : NULL;
    }
}

/* First line of the log that says "error", else its first non-empty line. */
static void first_error_line(const char *log, char *out, size_t len) {
    const char *hit = strstr(log, "error");
    const char *start = hit ? hit : log;
    while (hit && start > log && start[-1] != '\n') start--;
    while (*start == '\n') start++;
    size_t n = strcspn(start, "\n");
    if (n >= len) n = len - 1;
    memcpy(out, start, n);
    out[n] = '\0';
    if (!*out) mt_fmt(out, len, "NVRTC failed with an empty log");
}

static int read_file(const char *path, unsigned char **buf, size_t *size) {
    FILE *f = NULL;
    char why[300];
    /* without blocking, a regular file only: a FIFO in the cache must not hold the worker */
    int rc = mt_fopen_regular(path, &f, why, sizeof why);
    if (rc != MT_OK) return rc == MT_NOTFOUND ? MT_NOTFOUND : MT_IO;
    rc = MT_IO;
    long n;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0) goto out;
    *buf = mt_malloc((size_t)n);
    if (!*buf) {
        rc = MT_NOMEM;
        goto out;
    }
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        free(*buf);
        *buf = NULL;
        goto out;
    }
    *size = (size_t)n;
    rc = MT_OK;
out:
    fclose(f);
    return rc;
}

/* Writes bytes to path through a unique temporary file and rename(), so a reader never
 * sees a partial image even with several workers sharing the cache. */
static atomic_ulong g_tmp_seq;

static int write_atomic(const char *path, const void *data, size_t size) {
    char tmp[4200];
    mt_fmt(tmp, sizeof tmp, "%s.tmp.%d.%lu", path, (int)getpid(), (unsigned long)atomic_fetch_add(&g_tmp_seq, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return MT_IO;
    const unsigned char *p = data;
    size_t left = size;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            close(fd);
            unlink(tmp);
            return MT_IO;
        }
        p += w;
        left -= (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return MT_IO;
    }
    return MT_OK;
}

/* Compiles src with opts into img, through the disk cache when cache_dir is set. */
static int compile_source(const char *src, const char *name, const char **opts, int nopts, const char *cache_dir,
                          wcu_image_t *img) {
    int rc = MT_ERR;
    nvrtcProgram prog = NULL;
    char *log = NULL;
    char path[4096] = "", info_path[4160] = "";
    memset(img, 0, sizeof *img);
    uint64_t t0 = mt_now_us();

    if (cache_dir && *cache_dir) {
        int maj, min;
        wcu_nvrtc_version(&maj, &min);
        uint64_t h = mt_fnv1a(MT_FNV_INIT, src, strlen(src));
        for (int i = 0; i < nopts; i++) h = mt_fnv1a(h, opts[i], strlen(opts[i]) + 1);
        h = mt_fnv1a(h, &maj, sizeof maj);
        h = mt_fnv1a(h, &min, sizeof min);
        mt_fmt(path, sizeof path, "%s/%s-%016llx.cubin", cache_dir, name, (unsigned long long)h);
        mt_fmt(info_path, sizeof info_path, "%s.info", path);
        unsigned char *info = NULL;
        size_t info_size = 0;
        if (read_file(path, &img->cubin, &img->cubin_size) == MT_OK &&
            read_file(info_path, &info, &info_size) == MT_OK) {
            char text[64];
            size_t n = info_size < sizeof text - 1 ? info_size : sizeof text - 1;
            memcpy(text, info, n);
            text[n] = '\0';
            free(info);
            if (sscanf(text, "%u %u", &img->regs, &img->spill_bytes) == 2) {
                img->ok = 1;
                img->from_cache = 1;
                return MT_OK;
            }
        }
        free(info);
        free(img->cubin);
        img->cubin = NULL;
        img->cubin_size = 0;
    }

    nvrtcResult nr = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
    if (nr != NVRTC_SUCCESS) {
        mt_fmt(img->error, sizeof img->error, "nvrtcCreateProgram: %s", nvrtcGetErrorString(nr));
        goto out;
    }
    nvrtcResult cr = nvrtcCompileProgram(prog, nopts, opts);
    size_t log_size = 0;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 0) {
        log = mt_malloc(log_size + 1);
        if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
        if (log) log[log_size] = '\0';
    }
    if (cr != NVRTC_SUCCESS) {
        if (log && *log)
            first_error_line(log, img->error, sizeof img->error);
        else
            mt_fmt(img->error, sizeof img->error, "nvrtcCompileProgram: %s", nvrtcGetErrorString(cr));
        goto out;
    }
    if ((nr = nvrtcGetCUBINSize(prog, &img->cubin_size)) != NVRTC_SUCCESS || img->cubin_size == 0) {
        mt_fmt(img->error, sizeof img->error, "nvrtcGetCUBINSize: %s", nvrtcGetErrorString(nr));
        goto out;
    }
    img->cubin = mt_malloc(img->cubin_size);
    if (!img->cubin) {
        mt_fmt(img->error, sizeof img->error, "out of memory for a %zu B image", img->cubin_size);
        goto out;
    }
    if ((nr = nvrtcGetCUBIN(prog, (char *)img->cubin)) != NVRTC_SUCCESS) {
        mt_fmt(img->error, sizeof img->error, "nvrtcGetCUBIN: %s", nvrtcGetErrorString(nr));
        goto out;
    }
    parse_resources(log, &img->regs, &img->spill_bytes);
    img->ok = 1;
    rc = MT_OK;
    if (*path) {
        char err[200], info[64];
        /* A cache that cannot be written only costs a compile next time. */
        if (mt_mkdirs(cache_dir, err, sizeof err) == MT_OK &&
            write_atomic(path, img->cubin, img->cubin_size) == MT_OK) {
            mt_fmt(info, sizeof info, "%u %u\n", img->regs, img->spill_bytes);
            write_atomic(info_path, info, strlen(info));
        }
    }
out:
    img->compile_s = (double)(mt_now_us() - t0) / 1e6;
    if (rc != MT_OK) {
        free(img->cubin);
        img->cubin = NULL;
        img->cubin_size = 0;
        img->ok = 0;
    }
    free(log);
    if (prog) nvrtcDestroyProgram(&prog);
    return rc;
}

mt_status_t wcu_compile_config(const krn_config_t *cfg, uint32_t cc_major, uint32_t cc_minor, const char *cache_dir,
                               wcu_image_t *img) {
    char o[8][48];
    const char *opts[12];
    int n = 0;
    uint32_t wm = krn_warps_m(cfg);
    if (wm == 0) {
        memset(img, 0, sizeof *img);
        mt_fmt(img->error, sizeof img->error, "no warp layout for %ux%u with %u warps", cfg->block_m, cfg->block_n,
               cfg->num_warps);
        return MT_INVAL;
    }
    mt_fmt(o[0], sizeof o[0], "--gpu-architecture=sm_%u%u", cc_major, cc_minor);
    mt_fmt(o[1], sizeof o[1], "-DBLOCK_M=%u", cfg->block_m);
    mt_fmt(o[2], sizeof o[2], "-DBLOCK_N=%u", cfg->block_n);
    mt_fmt(o[3], sizeof o[3], "-DBLOCK_K=%u", cfg->block_k);
    mt_fmt(o[4], sizeof o[4], "-DNUM_WARPS=%u", cfg->num_warps);
    mt_fmt(o[5], sizeof o[5], "-DNUM_STAGES=%u", cfg->num_stages);
    mt_fmt(o[6], sizeof o[6], "-DWARPS_M=%u", wm);
    for (int i = 0; i < 7; i++) opts[n++] = o[i];
    opts[n++] = "--std=c++17";
    opts[n++] = "-Xptxas=-v";
    char name[64];
    mt_fmt(name, sizeof name, "moe_gemm_%ux%ux%u_w%u_s%u", cfg->block_m, cfg->block_n, cfg->block_k, cfg->num_warps,
           cfg->num_stages);
    return compile_source(krn_src_moe_gemm, name, opts, n, cache_dir, img);
}

mt_status_t wcu_compile_common(uint32_t cc_major, uint32_t cc_minor, const char *cache_dir, wcu_image_t *img) {
    char arch[48];
    const char *opts[3];
    mt_fmt(arch, sizeof arch, "--gpu-architecture=sm_%u%u", cc_major, cc_minor);
    opts[0] = arch;
    opts[1] = "--std=c++17";
    opts[2] = "-Xptxas=-v";
    return compile_source(krn_src_moe_common, "moe_common", opts, 3, cache_dir, img);
}

/* Parses one "BMxBNxBKxGMxWxS" entry; 1 when it names cfg. */
static int inject_matches(const char *spec, size_t len, const krn_config_t *cfg) {
    char buf[64];
    krn_config_t v;
    if (len >= sizeof buf) return 0;
    memcpy(buf, spec, len);
    buf[len] = '\0';
    return krn_config_parse(buf, &v) == MT_OK && memcmp(&v, cfg, sizeof v) == 0;
}

int wcu_inject_for(const krn_config_t *cfg) {
    const char *env = getenv("MOETUNE_CUDA_INJECT");
    static const struct {
        const char *kind;
        int code;
    } kinds[] = {{"fault:", 1}, {"hang:", 2}, {"wrong:", 3}};
    if (!env) return 0;
    for (const char *p = env; *p;) {
        size_t n = strcspn(p, ",");
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            size_t kl = strlen(kinds[i].kind);
            if (n > kl && strncmp(p, kinds[i].kind, kl) == 0 && inject_matches(p + kl, n - kl, cfg))
                return kinds[i].code;
        }
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}
