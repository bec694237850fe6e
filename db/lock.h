/*
 * lock.h - one writer per database file: an flock(2) on the database file itself (so a
 * symlink or a hard link to it meets the same lock), and a lock file beside the path
 * ("<db>.lock") that records who holds it (pid, host, since when).
 *
 * The lock is held for as long as the descriptor is open, so it goes away with its
 * process however that ends (a SIGKILL too); a stale file left behind is never an
 * obstacle. The descriptor is close-on-exec: children do not inherit it.
 */
#ifndef DB_LOCK_H
#define DB_LOCK_H

#include <stddef.h>

#include "mt.h"

typedef struct db_lock db_lock_t;

/* Takes the lock of the database at db_path without waiting (the file is created empty
 * when missing; a FIFO or other non-regular file is MT_INVAL). MT_OK with *out set;
 * MT_BUSY when another process holds it, with one line in err naming the holder
 * ("database X is in use by pid 123 on host h since 2026-12-01T10:00:00Z (lock file
 * X.lock)"); MT_IO when the lock file cannot be opened, with errno's text. */
mt_status_t db_lock_acquire(const char *db_path, db_lock_t **out, char *err, size_t errlen);

/* MT_OK unless writing out_path would write over the database at db_path or one of its
 * companions (its -wal, -shm or -journal file, its .lock file), by name, through a
 * symlink or through a hard link; then MT_INVAL with one line in err ("PATH is the
 * database's -wal file; refusing to write over it"). For every command that writes a
 * file while reading a database. */
mt_status_t db_lock_refuse_overwrite(const char *db_path, const char *out_path, char *err, size_t errlen);

/* Releases the lock and closes its file; NULL-safe, nulls *lock. The file stays (an
 * unlocked file means nothing). */
void db_lock_release(db_lock_t **lock);

#endif
