/* routing.c - captured routing files. See routing.h. */
#include "routing.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"
#include "space.h"

void krn_routing_clear(krn_routing_t *r) {
    if (!r) return;
    free(r->ids);
    memset(r, 0, sizeof *r);
}

/* The value of 'key' in a .npy header dict: a pointer just past "'key':" and its spaces. */
static const char *header_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

/* "(tokens, topk)" with both positive and the product within range. */
static int parse_dims(const char *p, uint64_t *tokens, uint64_t *topk) {
    if (!p || *p++ != '(') return MT_INVAL;
    uint64_t v[3];
    int n = 0;
    for (;;) {
        while (*p == ' ') p++;
        if (*p == ')') break;
        if (n == 3 || *p < '0' || *p > '9') return MT_INVAL;
        uint64_t x = 0;
        while (*p >= '0' && *p <= '9') {
            if (x > UINT32_MAX) return MT_INVAL;
            x = x * 10 + (uint64_t)(*p++ - '0');
        }
        v[n++] = x;
        while (*p == ' ') p++;
        if (*p == ',') p++;
    }
    if (n != 2 || v[0] == 0 || v[1] == 0 || v[0] > UINT32_MAX || v[1] > UINT32_MAX) return MT_INVAL;
    *tokens = v[0];
    *topk = v[1];
    return MT_OK;
}

mt_status_t krn_routing_parse(const uint8_t *d, size_t len, krn_routing_t *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (len < 10 || memcmp(d, "\x93NUMPY", 6) != 0) {
        mt_fmt(err, errlen, "not a .npy file (no \\x93NUMPY magic)");
        return MT_INVAL;
    }
    size_t hlen, start;
    if (d[6] == 1) {
        hlen = (size_t)d[8] | (size_t)d[9] << 8;
        start = 10;
    } else if (d[6] == 2 || d[6] == 3) {
        if (len < 12) {
            mt_fmt(err, errlen, "truncated .npy header");
            return MT_INVAL;
        }
        hlen = (size_t)d[8] | (size_t)d[9] << 8 | (size_t)d[10] << 16 | (size_t)d[11] << 24;
        start = 12;
    } else {
        mt_fmt(err, errlen, ".npy version %u is not 1, 2 or 3", d[6]);
        return MT_INVAL;
    }
    if (hlen > KRN_ROUTING_HEADER_MAX || hlen > len - start) {
        mt_fmt(err, errlen, ".npy header of %zu bytes is truncated or too large", hlen);
        return MT_INVAL;
    }
    char *h = malloc(hlen + 1);
    if (!h) return MT_NOMEM;
    memcpy(h, d + start, hlen);
    h[hlen] = '\0';
    int rc = MT_INVAL;
    size_t item = 0;
    uint64_t tokens = 0, topk = 0;
    const char *descr = header_value(h, "descr"), *fo = header_value(h, "fortran_order");
    if (strlen(h) != hlen || h[0] != '{') {
        mt_fmt(err, errlen, ".npy header is not a dict");
    } else if (!descr || (strncmp(descr, "'<i4'", 5) != 0 && strncmp(descr, "'<i8'", 5) != 0)) {
        mt_fmt(err, errlen, "dtype %.8s: expert ids must be int32 or int64 (<i4, <i8)", descr ? descr : "missing");
    } else if (!fo || strncmp(fo, "False", 5) != 0) {
        mt_fmt(err, errlen, "fortran_order arrays are not read; save it C-ordered");
    } else if (parse_dims(header_value(h, "shape"), &tokens, &topk) != MT_OK) {
        mt_fmt(err, errlen, "shape is not [tokens, topk]");
    } else {
        item = descr[3] == '4' ? 4 : 8;
        rc = MT_OK;
    }
    free(h);
    if (rc) return rc;
    size_t body = len - start - hlen;
    char over[40] = "";
    if (topk > KRN_MAX_TOPK) mt_fmt(over, sizeof over, " (and topk is at most %u)", KRN_MAX_TOPK);
    if (topk > KRN_MAX_TOPK || tokens > SIZE_MAX / 8 / topk || body != tokens * topk * item) {
        mt_fmt(err, errlen, "data is %zu bytes, [%llu, %llu] int%zu needs %llu%s", body, (unsigned long long)tokens,
               (unsigned long long)topk, item * 8, (unsigned long long)(tokens * topk * item), over);
        return MT_INVAL;
    }
    r->ids = malloc(tokens * topk * sizeof *r->ids);
    if (!r->ids) return MT_NOMEM;
    const uint8_t *p = d + start + hlen;
    for (size_t i = 0; i < tokens * topk; i++, p += item) {
        uint64_t v = 0;
        for (size_t b = item; b-- > 0;) v = v << 8 | p[b];
        int64_t sv = item == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        if (sv < 0 || sv > 65535) {
            mt_fmt(err, errlen, "expert id %lld at row %zu is out of range 0..65535", (long long)sv, i / topk);
            krn_routing_clear(r);
            return MT_INVAL;
        }
        r->ids[i] = (uint32_t)sv;
        if (r->ids[i] > r->max_id) r->max_id = r->ids[i];
    }
    r->tokens = (uint32_t)tokens;
    r->topk = (uint32_t)topk;
    unsigned char dig[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(dig, d, len);
    for (size_t i = 0; i < sizeof dig; i++) snprintf(r->sha256 + 2 * i, 3, "%02x", dig[i]);
    return MT_OK;
}

mt_status_t krn_routing_load(const char *path, krn_routing_t *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    uint8_t *buf = NULL;
    int rc = MT_OK;
    char why[256];
    FILE *f = NULL;
    rc = mt_fopen_regular(path, &f, err, errlen); /* a FIFO would block */
    if (rc) return rc == MT_NOTFOUND ? MT_IO : rc;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        mt_fmt(err, errlen, "%s: not a regular file", path);
        rc = MT_IO;
        goto out;
    }
    if ((unsigned long)size > KRN_ROUTING_MAX_BYTES) {
        mt_fmt(err, errlen, "%s: %ld bytes, larger than the %u a routing file may have", path, size,
               KRN_ROUTING_MAX_BYTES);
        rc = MT_INVAL;
        goto out;
    }
    buf = malloc((size_t)size + 1);
    if (!buf) {
        rc = MT_NOMEM;
        goto out;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        mt_fmt(err, errlen, "%s: read error", path);
        rc = MT_IO;
        goto out;
    }
    rc = krn_routing_parse(buf, (size_t)size, r, why, sizeof why);
    if (rc == MT_NOMEM)
        mt_fmt(err, errlen, "%s: out of memory", path);
    else if (rc)
        mt_fmt(err, errlen, "%s: %s", path, why);
out:
    free(buf);
    fclose(f);
    return rc;
}

mt_status_t krn_routing_file_sha256(const char *path, char out[65], char *err, size_t errlen) {
    FILE *f = NULL;
    int rc = mt_fopen_regular(path, &f, err, errlen); /* a FIFO would block */
    if (rc) return rc == MT_NOTFOUND ? MT_IO : rc;
    crypto_hash_sha256_state h;
    crypto_hash_sha256_init(&h);
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) crypto_hash_sha256_update(&h, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        mt_fmt(err, errlen, "%s: read error", path);
        return MT_IO;
    }
    unsigned char dig[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&h, dig);
    for (size_t i = 0; i < sizeof dig; i++) snprintf(out + 2 * i, 3, "%02x", dig[i]);
    return MT_OK;
}

mt_status_t krn_routing_check(const krn_routing_t *r, uint32_t experts, uint32_t topk, char *err, size_t errlen) {
    if (r->topk != topk) {
        mt_fmt(err, errlen, "%u experts per token, the shape has topk=%u", r->topk, topk);
        return MT_INVAL;
    }
    if (r->max_id >= experts) {
        mt_fmt(err, errlen, "expert id %u is out of range 0..%u (E=%u)", r->max_id, experts - 1, experts);
        return MT_INVAL;
    }
    return MT_OK;
}

void krn_routing_rows(uint32_t tokens, uint32_t m, uint64_t seed, uint32_t *rows) {
    uint64_t state = seed ^ ((uint64_t)m * MT_GOLDEN64);
    for (uint32_t i = 0; i < m; i++) rows[i] = (uint32_t)(mt_mix64(state += MT_GOLDEN64) % tokens);
}
