/*
 * writer.h - the coordinator's database writer thread. It owns a second store
 * connection and runs one job at a time inside an IMMEDIATE transaction, so the
 * event loop never waits for SQLite on the hot path. The loop hands a job over
 * with writer_submit(), keeps polling its sockets plus writer_fd(), and takes
 * the outcome back with writer_poll().
 *
 * One job in flight at most: commits happen in submission order. The job's
 * argument belongs to the writer thread from writer_submit() until writer_poll()
 * returns it; the loop must not touch it in between.
 */
#ifndef COORD_WRITER_H
#define COORD_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "store.h"

/* How long one commit waits for a lock held by another connection (ms). */
#define WRITER_BUSY_MS 1000

typedef struct writer writer_t;

/* Runs on the writer thread inside a transaction on db. Returns MT_OK to
 * commit; anything else rolls the transaction back and is reported. */
typedef mt_status_t (*writer_fn)(store_t *db, void *arg);

/* Opens a connection to db_path (already created and migrated by the caller)
 * and starts the thread. MT_OK with *out set, or MT_IO/MT_ERR with a reason. */
mt_status_t writer_new(const char *db_path, writer_t **out, char *err, size_t errlen);

/* A descriptor that becomes readable when a job has finished (for zmq_poll). */
int writer_fd(const writer_t *w);

/* Hands fn(db, arg) to the thread. MT_BUSY when a job is still in flight or
 * not yet taken back with writer_poll(). */
mt_status_t writer_submit(writer_t *w, writer_fn fn, void *arg);

/* As writer_submit(), with prep(db, arg) run first on the thread outside any
 * transaction (work that needs no lock, e.g. planning); when it fails, fn does not
 * run, no transaction is opened and its code is reported (why empty: prep keeps its
 * own reason in arg). */
mt_status_t writer_submit_prep(writer_t *w, writer_fn prep, writer_fn fn, void *arg);

/* True from writer_submit() until writer_poll() has returned the job. */
bool writer_busy(const writer_t *w);

/* Takes back a finished job: MT_OK with *arg, *rc (MT_OK when committed) and,
 * on failure, the database's reason copied into why; MT_AGAIN when none has
 * finished. Waits up to timeout_ms for it (0 = do not wait, -1 = forever). */
mt_status_t writer_poll(writer_t *w, int timeout_ms, void **arg, int *rc, char *why, size_t whylen);

/* Microseconds the last finished job took, transaction included. */
uint64_t writer_last_us(const writer_t *w);

/* Stops the thread after the job in flight (whose argument is then lost to the
 * caller: poll it back first) and closes the connection. NULL-safe, nulls *w. */
void writer_destroy(writer_t **w);

#endif
