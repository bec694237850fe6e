/*
 * exports.h - the one write the CLI makes to the store: the rows of `exports` that
 * record which config files an export wrote (docs/design.md, "Store").
 *
 * Everything else the CLI reads goes through query.h, read-only; the coordinator's
 * writes go through store.h. This opens its own short-lived read-write connection, so
 * it runs beside a live coordinator (WAL, busy timeout).
 */
#ifndef DBX_EXPORTS_H
#define DBX_EXPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"

/* One exported file. Strings are borrowed for the call. */
typedef struct {
    const char *path;      /* relative to out_dir */
    const char *sweep_ids; /* "1,3" */
    uint32_t entries, changed;
    const char *content_hash;
} dbx_export_t;

/* Inserts rows[0, n) in one transaction, created = now. Returns MT_OK, MT_BUSY when
 * the database stayed locked past the busy timeout, MT_IO when it cannot be opened,
 * MT_ERR otherwise; sqlite's text in err. n = 0 opens nothing. */
mt_status_t dbx_exports_add(const char *db_path, const char *out_dir, const dbx_export_t *rows, size_t n, char *err,
                            size_t errlen);

/* MT_OK when an export could record its files in the database at db_path: it opens read
 * and write and takes the write lock for a moment. MT_INVAL for a read-only database
 * ("PATH is read-only: ..."), else dbx_exports_add's answers; one line in err. An export
 * asks before it writes any file, so a database it cannot record in writes nothing. */
mt_status_t dbx_exports_writable(const char *db_path, char *err, size_t errlen);

#endif
