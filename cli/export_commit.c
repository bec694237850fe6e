/* export_commit.c - the folder an export writes: its lock, its manifests, and the commit
 * of the planned files (synced temp files, a journal of the renames, the renames, the
 * record in the database), completed or cleaned up by the next export after a crash. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "export_int.h"
#include "exports.h"
#include "lock.h"
#include "mt.h"

static int recover(run_t *x, char *err, size_t errlen);

/* One file of a commit: its new text goes to tmp, then tmp is renamed to path. */
typedef struct {
    char path[1600], tmp[1600];
    const char *text;
    char *own; /* a manifest's text, freed with the move */
} move_t;

/* Takes an exclusive lock on out_dir (created when missing) for the whole export, then
 * completes or cleans up what an export that died there left (recover). */
int exp_lock_out(run_t *x, char *err, size_t errlen) {
    int rc = mt_mkdirs(x->o->out_dir, err, errlen);
    if (rc != MT_OK) return rc;
    x->lock_fd = open(x->o->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (x->lock_fd < 0) {
        mt_fmt(err, errlen, "%s: %s", x->o->out_dir, strerror(errno));
        return MT_IO;
    }
    uint64_t start = mt_now_ms();
    while (flock(x->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            mt_fmt(err, errlen, "lock %s: %s", x->o->out_dir, strerror(errno));
            return MT_IO;
        }
        if (mt_now_ms() - start > LOCK_WAIT_MS) {
            mt_fmt(err, errlen, "another export into %s has held its lock for over %d s; nothing written",
                   x->o->out_dir, LOCK_WAIT_MS / 1000);
            return MT_BUSY;
        }
        usleep(10000);
    }
    return recover(x, err, errlen);
}

/* The manifest of a folder, loaded once (after the lock). A manifest that exists but
 * is not a JSON object is refused: rebuilding it would drop its records. */
int exp_manifest_for(run_t *x, const char *dir, json_t **out, char *err, size_t errlen) {
    for (size_t i = 0; i < x->n_dirs; i++) {
        if (strcmp(x->dirs[i].dir, dir) == 0) {
            *out = x->dirs[i].m;
            return MT_OK;
        }
    }
    char mpath[1100];
    json_error_t jerr;
    json_t *m = NULL;
    mt_fmt(mpath, sizeof mpath, "%s/manifest.json", dir);
    if (access(mpath, F_OK) == 0) {
        /* read without blocking, a regular file only: a FIFO there must not hold the export */
        char *text = NULL, why[600];
        size_t len = 0;
        int rrc = mt_read_regular(mpath, 256u << 20, &text, &len, why, sizeof why);
        if (rrc != MT_OK) {
            mt_fmt(err, errlen, "%s; move it away to export", why);
            return rrc == MT_NOMEM ? MT_NOMEM : rrc == MT_INVAL ? MT_INVAL : MT_IO;
        }
        m = json_loadb(text, len, JSON_PRESERVE_ORDER, &jerr);
        free(text);
        if (!json_is_object(m)) {
            mt_fmt(err, errlen, "%s is not a manifest (%s); move it away to export", mpath,
                   m ? "not a JSON object" : jerr.text);
            json_decref(m);
            return MT_INVAL;
        }
    } else {
        m = json_object();
    }
    mdir_t *grown = mt_realloc(x->dirs, (x->n_dirs + 1) * sizeof *grown);
    if (!grown || !m) {
        json_decref(m);
        if (grown) x->dirs = grown;
        return MT_NOMEM;
    }
    x->dirs = grown;
    mt_fmt(x->dirs[x->n_dirs].dir, sizeof x->dirs[0].dir, "%s", dir);
    x->dirs[x->n_dirs++].m = m;
    *out = m;
    return MT_OK;
}

/* Writes text to the new file tmp, the temp file of path (errors name path), and syncs
 * it to disk; on any error the file is removed. */
static int write_temp(const char *tmp, const char *path, const char *text, char *err, size_t errlen) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "%s: %s", tmp, strerror(errno));
        return MT_IO;
    }
    size_t len = strlen(text), done = 0;
    int rc = MT_OK;
    while (done < len && rc == MT_OK) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            mt_fmt(err, errlen, "%s: %s", path, w < 0 ? strerror(errno) : "short write");
            rc = MT_IO;
        } else {
            done += (size_t)w;
        }
    }
    if (rc == MT_OK && fsync(fd) != 0) {
        mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
        rc = MT_IO;
    }
    if (close(fd) != 0 && rc == MT_OK) {
        mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
        rc = MT_IO;
    }
    if (rc != MT_OK) unlink(tmp);
    return rc;
}

/* Syncs a folder, so the renames in it are on disk. */
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    if (fsync(fd) != 0) { /* nothing more to do: the renames themselves succeeded */
    }
    close(fd);
}

/* Test hook: MOETUNE_TEST_EXPORT_DIE=step or step:n kills the export (SIGKILL) at that
 * point of its commit, so that the tests can check what a crash there leaves behind. */
static void die_at(const char *step, size_t n) {
    const char *at = getenv("MOETUNE_TEST_EXPORT_DIE");
    char want[48];
    if (!at) return;
    snprintf(want, sizeof want, "%s:%zu", step, n);
    if (strcmp(at, step) == 0 || strcmp(at, want) == 0) raise(SIGKILL);
}

/* Whether name is "<something>.tmp.<pid>" with a pid not alive (and not ours): a temp
 * file of an export that died. */
static bool stale_temp(const char *name) {
    const char *t = strstr(name, ".tmp.");
    while (t && strstr(t + 1, ".tmp.")) t = strstr(t + 1, ".tmp.");
    if (!t || t == name || !t[5]) return false;
    char *end = NULL;
    long pid = strtol(t + 5, &end, 10);
    if (*end || pid <= 0 || pid == (long)getpid()) return false;
    bool ours = (t - name >= 5 && strncmp(t - 5, ".json", 5) == 0) ||
                ((size_t)(t - name) == strlen(JOURNAL) && strncmp(name, JOURNAL, strlen(JOURNAL)) == 0);
    return ours && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Removes the stale temp files of dir and, depth levels down, of its folders. */
static void clean_temps(const char *dir, int depth) {
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        char path[1500];
        struct stat st;
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && depth > 0)
            clean_temps(path, depth - 1);
        else if (S_ISREG(st.st_mode) && stale_temp(e->d_name))
            unlink(path);
    }
    closedir(d);
}

/* A path of the journal: relative, no "..", no control character. */
static bool journal_path_ok(const char *p) {
    size_t n = strlen(p);
    if (!n || *p == '/' || strncmp(p, "../", 3) == 0 || strstr(p, "/../") || strcmp(p, "..") == 0 ||
        (n >= 3 && strcmp(p + n - 3, "/..") == 0))
        return false;
    for (; *p; p++)
        if ((unsigned char)*p < 0x20) return false;
    return true;
}

/* Finishes the renames of an export that died after committing to them (its journal is
 * in out_dir), then removes the temp files of exports that died before: the folder then
 * holds one export's state whole. Runs under the folder's lock, before anything is read. */
static int recover(run_t *x, char *err, size_t errlen) {
    const char *out = x->o->out_dir;
    char jpath[1100], line[3300];
    mt_fmt(jpath, sizeof jpath, "%s/%s", out, JOURNAL);
    FILE *j = NULL;
    int rc = mt_fopen_regular(jpath, &j, err, errlen);
    if (rc == MT_NOTFOUND) {
        clean_temps(out, 2);
        return MT_OK;
    }
    if (rc != MT_OK) return rc;
    while (fgets(line, sizeof line, j)) {
        char *tab = strchr(line, '\t');
        line[strcspn(line, "\n")] = '\0';
        if (tab) *tab = '\0';
        size_t fl = tab ? strlen(tab + 1) : 0;
        if (!tab || !journal_path_ok(line) || !journal_path_ok(tab + 1) || strncmp(line, tab + 1, fl) != 0 ||
            strncmp(line + fl, ".tmp.", 5) != 0) {
            mt_fmt(err, errlen, "%s is damaged; nothing written: move it away to export into %s", jpath, out);
            fclose(j);
            return MT_INVAL;
        }
        char from[1600], to[1600];
        struct stat st;
        mt_fmt(from, sizeof from, "%s/%s", out, line);
        mt_fmt(to, sizeof to, "%s/%s", out, tab + 1);
        /* a temp file that is gone was renamed before the export died */
        if (lstat(from, &st) == 0 && rename(from, to) != 0) {
            mt_fmt(err, errlen, "completing an interrupted export: rename %s: %s", to, strerror(errno));
            fclose(j);
            return MT_IO;
        }
        char *slash = strrchr(to, '/');
        if (slash) *slash = '\0';
        sync_dir(to);
        x->recovered++;
    }
    fclose(j);
    if (unlink(jpath) != 0) {
        mt_fmt(err, errlen, "%s: %s", jpath, strerror(errno));
        return MT_IO;
    }
    sync_dir(out);
    clean_temps(out, 2);
    return MT_OK;
}

/* Adds the move of text to mdir/name; false when out of memory. */
static bool add_move(move_t **mv, size_t *n, size_t *cap, const char *mdir, const char *name, const char *text,
                     char *own) {
    if (mt_grow((void **)mv, cap, *n + 1, sizeof **mv, 8) != MT_OK) return false;
    move_t *m = &(*mv)[(*n)++];
    mt_fmt(m->path, sizeof m->path, "%s/%s", mdir, name);
    mt_fmt(m->tmp, sizeof m->tmp, "%s.tmp.%ld", m->path, (long)getpid());
    m->text = text;
    m->own = own;
    return true;
}

/* The moves of the planned files, folder by folder, each folder's manifest (with the
 * records of its files) after its files. */
static int plan_moves(run_t *x, move_t **mv, size_t *n_mv) {
    size_t cap = 0;
    for (size_t d = 0; d < x->n_dirs; d++) {
        mdir_t *md = &x->dirs[d];
        size_t n_done = 0;
        for (size_t i = 0; i < x->n_pend; i++) {
            pend_t *p = &x->pend[i];
            if (strcmp(p->mdir, md->dir) != 0) continue;
            if (p->text && !add_move(mv, n_mv, &cap, p->mdir, p->name, p->text, NULL)) return MT_NOMEM;
            json_object_set(md->m, p->name, p->rec);
            n_done++;
        }
        if (n_done == 0) continue;
        char *text = exp_dump(md->m);
        if (!text || !add_move(mv, n_mv, &cap, md->dir, "manifest.json", text, text)) {
            free(text);
            return MT_NOMEM;
        }
    }
    return MT_OK;
}

/* path relative to out_dir (every file of an export lies under it). */
static const char *rel_to(const run_t *x, const char *path) {
    size_t n = strlen(x->o->out_dir);
    return strncmp(path, x->o->out_dir, n) == 0 && path[n] == '/' ? path + n + 1 : path;
}

/* Writes the journal: the renames this export commits to, one "tmp<TAB>path" line each
 * (relative to out_dir), through a temp file and a rename, synced. From then on the
 * export lands whole: what a crash leaves undone, the next export's recover() does. */
static int write_journal(run_t *x, const move_t *mv, size_t n, char *err, size_t errlen) {
    char jpath[1100], tmp[1200];
    char *text = NULL;
    int rc = MT_OK;
    mt_fmt(jpath, sizeof jpath, "%s/%s", x->o->out_dir, JOURNAL);
    mt_fmt(tmp, sizeof tmp, "%s.tmp.%ld", jpath, (long)getpid());
    for (size_t i = 0; i < n && rc == MT_OK; i++) {
        char line[3300];
        mt_fmt(line, sizeof line, "%s\t%s", rel_to(x, mv[i].tmp), rel_to(x, mv[i].path));
        if (!exp_append_line(&text, line)) rc = MT_NOMEM;
    }
    if (rc == MT_OK) rc = write_temp(tmp, jpath, text ? text : "", err, errlen);
    if (rc == MT_OK && rename(tmp, jpath) != 0) {
        mt_fmt(err, errlen, "rename %s: %s", jpath, strerror(errno));
        unlink(tmp);
        rc = MT_IO;
    }
    if (rc == MT_OK) sync_dir(x->o->out_dir);
    free(text);
    return rc;
}

/* Writes the planned files and manifests so that the folder holds either the previous
 * state or the new one whole, never a mix: every new text goes to a synced temp file
 * first (a full disk fails here, and the temp files are removed); then the journal
 * commits to the renames; then the renames, files before manifests; then the journal
 * goes. No path written is the database or one of its files. The files are then
 * recorded in the database. */
int exp_commit(run_t *x, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    dbx_export_t *rows = NULL;
    move_t *mv = NULL;
    size_t n_mv = 0, n_tmp = 0;
    rc = plan_moves(x, &mv, &n_mv);
    for (size_t i = 0; i < n_mv && rc == MT_OK; i++) {
        rc = db_lock_refuse_overwrite(o->db_path, mv[i].path, err, errlen);
        if (rc == MT_OK) rc = db_lock_refuse_overwrite(o->db_path, mv[i].tmp, err, errlen);
    }
    for (; n_tmp < n_mv && rc == MT_OK; n_tmp++)
        rc = write_temp(mv[n_tmp].tmp, mv[n_tmp].path, mv[n_tmp].text, err, errlen);
    die_at("temps", 0);
    if (rc == MT_OK && n_mv) rc = write_journal(x, mv, n_mv, err, errlen);
    if (rc != MT_OK) {
        for (size_t i = 0; i < n_tmp; i++) unlink(mv[i].tmp);
        if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
        goto out;
    }
    die_at("journal", 0);
    for (size_t i = 0; i < n_mv && rc == MT_OK; i++) {
        if (rename(mv[i].tmp, mv[i].path) != 0) {
            mt_fmt(err, errlen, "rename %s: %s (the next export into %s completes this one)", mv[i].path,
                   strerror(errno), o->out_dir);
            rc = MT_IO;
        }
        die_at("rename", i + 1);
    }
    if (rc != MT_OK) goto out;
    for (size_t d = 0; d < x->n_dirs; d++) sync_dir(x->dirs[d].dir);
    if (n_mv) {
        char jpath[1100];
        mt_fmt(jpath, sizeof jpath, "%s/%s", o->out_dir, JOURNAL);
        unlink(jpath);
        sync_dir(o->out_dir);
    }
    for (size_t i = 0; i < x->n_pend; i++) x->pend[i].done = true;
    rep->files = mt_calloc(x->n_pend + 1, sizeof *rep->files);
    rows = mt_calloc(x->n_pend + 1, sizeof *rows);
    if (!rep->files || !rows) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < x->n_pend; i++) {
        pend_t *p = &x->pend[i];
        if (o->changes && p->changes) fputs(p->changes, o->changes);
        rows[rep->n_files] = (dbx_export_t){p->f.path, p->meta.sweep_ids, p->f.entries, p->f.changed, p->meta.hash};
        rep->files[rep->n_files++] = p->f;
    }
    char derr[600];
    int drc = dbx_exports_add(o->db_path, o->out_dir, rows, rep->n_files, derr, sizeof derr);
    if (drc != MT_OK) {
        rc = drc;
        mt_fmt(err, errlen, "files written, but recording them in the database failed: %s", derr);
    }
out:
    for (size_t i = 0; i < n_mv; i++) free(mv[i].own);
    free(mv);
    free(rows);
    return rc;
}

void exp_run_free(run_t *x) {
    shipguard_free(&x->guard);
    for (size_t i = 0; i < x->n_pend; i++) {
        free(x->pend[i].text);
        json_decref(x->pend[i].rec);
        free(x->pend[i].changes);
    }
    free(x->pend);
    for (size_t i = 0; i < x->n_dirs; i++) json_decref(x->dirs[i].m);
    free(x->dirs);
    free(x->cov);
    for (size_t i = 0; i < x->n_sampled; i++) free(x->sampled[i].warm);
    free(x->sampled);
    if (x->lock_fd >= 0) close(x->lock_fd); /* releases the lock */
}

/* Dumps a JSON value the way the frameworks' files look: indent 4, keys in insertion
 * order, newline at the end. Caller frees. */
char *exp_dump(json_t *v) {
    char *body = json_dumps(v, JSON_PRESERVE_ORDER | JSON_INDENT(4));
    if (!body) return NULL;
    size_t n = strlen(body);
    char *text = mt_realloc(body, n + 2);
    if (!text) {
        free(body);
        return NULL;
    }
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}

/* Appends a line to a growing string; false when out of memory. */
bool exp_append_line(char **buf, const char *line) {
    size_t have = *buf ? strlen(*buf) : 0, add = strlen(line);
    char *grown = mt_realloc(*buf, have + add + 2);
    if (!grown) return false;
    memcpy(grown + have, line, add);
    grown[have + add] = '\n';
    grown[have + add + 1] = '\0';
    *buf = grown;
    return true;
}
