/*
 * routing.h - captured routing: the top-k expert ids a serving engine chose, read from a NumPy
 * .npy file (int32 or int64, [tokens, topk], little endian, C order), and the rows each batch
 * size draws from it.
 *
 * Every byte of the file is data: a wrong magic, version, dtype, order or rank, a header that is
 * too large or cut short, a body that is not exactly tokens * topk items, or an id out of range
 * is an error with a one-line reason, never a crash (tests/unit/test_routing.c fuzzes it).
 * The PyTorch .pt files SGLang's capture writes are read by the triton helper, where torch is.
 */
#ifndef KRN_ROUTING_H
#define KRN_ROUTING_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"

#define KRN_ROUTING_MAX_BYTES (1024u * 1024u * 1024u) /* larger files are refused */
#define KRN_ROUTING_HEADER_MAX 65536u

typedef struct {
    uint32_t tokens, topk;
    uint32_t *ids; /* tokens * topk expert ids, row-major; owned */
    uint32_t max_id;
    char sha256[65]; /* of the whole file, lowercase hex */
} krn_routing_t;

/* Parses a .npy image of len bytes into r (caller frees with krn_routing_clear). MT_INVAL with
 * the reason in err for anything but int32/int64 [tokens, topk] with ids >= 0. */
mt_status_t krn_routing_parse(const uint8_t *data, size_t len, krn_routing_t *r, char *err, size_t errlen);

/* Reads and parses the file at path; MT_IO when unreadable, MT_INVAL as above. The reason
 * starts with the path. */
mt_status_t krn_routing_load(const char *path, krn_routing_t *r, char *err, size_t errlen);

/* Checks r against a shape: topk equal, every id below experts. MT_INVAL with a reason. */
mt_status_t krn_routing_check(const krn_routing_t *r, uint32_t experts, uint32_t topk, char *err, size_t errlen);

/* The rows batch size m draws: m draws with replacement, splitmix64 seeded with
 * seed ^ (m * 0x9E3779B97F4A7C15); the triton helper's draw_rows() is the same. */
void krn_routing_rows(uint32_t tokens, uint32_t m, uint64_t seed, uint32_t *rows);

/* The sha256 (lowercase hex) of the file at path, for files only the triton helper parses
 * (PyTorch .pt). MT_IO with the reason, starting with the path. */
mt_status_t krn_routing_file_sha256(const char *path, char out[65], char *err, size_t errlen);

/* Frees r's ids and zeroes it. NULL-safe. */
void krn_routing_clear(krn_routing_t *r);

/* True when s is "" (uniform routing) or 64 lowercase hex digits (a routing's sha256). */
int krn_routing_hash_ok(const char *s);

#endif
