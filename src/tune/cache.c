/* The persistent tuning cache of this process: the in-memory table, the
 * file (location, load, corrupt-file handling), saving (background thread,
 * at exit, on demand) and the public cache API.
 *
 * Concurrency between processes: every write is a read-merge-write under
 * flock() on "<file>.lock", into a temporary file renamed over the cache,
 * so readers (which take no lock) always see a complete file and writers
 * never drop each other's entries. Only entries this process changed are
 * merged in, so a stale copy never overwrites another process's newer one.
 *
 * Locks inside the process, always taken in this order:
 *   g_save_mu (one save at a time) -> g_mu (the table) -> flock,
 * except that a save releases flock before it takes g_mu again to merge
 * the file back into memory. fork() is made safe by taking both mutexes
 * around it (pthread_atfork): a child never inherits a half-done save or a
 * held lock, and starts without a saver thread.
 *
 * Files that are not plain: a cache file that is a symbolic link (say to a
 * dotfiles folder) stays one: saves lock, write and rename next to the
 * link's final target, and clear deletes the target. A file that cannot be
 * read (permissions) or a folder that is not one is reported, never set
 * aside as corrupt nor overwritten, and this process keeps its results in
 * memory. A location longer than PATH_MAX is the same: reported, results
 * in memory, voxconv_cache_flush fails with the reason. Temporary files
 * of writers killed mid-save (tmp.<pid>.<n>) are removed by the next save
 * when their process is gone or they are older than ten minutes. */
#include "vc_tune.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define VC_PATH_MAX 4096
#define VC_CACHE_FILE_LIMIT ((size_t)512 << 20)
#define VC_SAVE_DEBOUNCE_MS 200
/* A temporary file this old is a dead writer's even if its pid lives. */
#define VC_STALE_TMP_SECONDS 600
/* Links followed to the real file (the kernel's own limit is 40). */
#define VC_MAX_LINKS 40

typedef struct file_stamp {
  int exists;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} file_stamp_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_save_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static vc_cache_db_t g_db; /* guarded by g_mu */
/* Bumped whenever what g_db answers may have changed (a put, a load, a
 * merge of another process's results, a clear): decisions memoised from
 * it (memo.c) are only valid for the generation they were made in. */
static unsigned g_generation;

static void bump_generation(void) {
  __atomic_add_fetch(&g_generation, 1u, __ATOMIC_RELEASE);
}

unsigned vc_cache_generation(void) {
  return __atomic_load_n(&g_generation, __ATOMIC_ACQUIRE);
}
static int g_loaded;       /* g_db holds the file at g_path */
static char g_path[VC_PATH_MAX];
static size_t g_path_len;    /* > VC_PATH_MAX - 1: g_path is cut, memory only */
static file_stamp_t g_stamp; /* of the file when last read or written */
static int g_pending;        /* entries await the saver */
static int g_saver_started, g_saver_stop, g_atexit_registered;

volatile int vc_cache_test_slow_write_us;

/* ---- fork safety ------------------------------------------------------ */
static void atfork_prepare(void) {
  pthread_mutex_lock(&g_save_mu);
  pthread_mutex_lock(&g_mu);
}
static void atfork_parent(void) {
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_save_mu);
}
static void atfork_child(void) {
  /* Threads do not survive fork: the child starts its own saver lazily. */
  g_saver_started = 0;
  g_saver_stop = 0;
  pthread_cond_init(&g_cond, NULL);
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_save_mu);
}
static void init_once(void) {
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}
static void ensure_init(void) {
  pthread_once(&g_once, init_once);
}

/* ---- location --------------------------------------------------------- */
/* The cache file's path into buf: its length, 0 when no location is known
 * (no HOME). A length >= size means buf holds only its start. */
static size_t location(char *buf, size_t size) {
  const char *dir = vc_getenv("VOXCONV_BENCHMARK_CACHE_DIR");
  int n;
  if (dir) {
    n = snprintf(buf, size, "%s/%s", dir, VC_CACHE_FILE_NAME);
  } else {
    const char *home = vc_getenv("HOME");
    if (!home) {
      struct passwd *pw = getpwuid(getuid());
      home = pw ? pw->pw_dir : NULL;
    }
    if (!home || !*home) {
      if (size)
        buf[0] = '\0';
      return 0;
    }
    n = snprintf(buf, size, "%s/.cache/voxconv/%s", home, VC_CACHE_FILE_NAME);
  }
  return n > 0 ? (size_t)n : 0;
}

int vc_cache_current_path(char *buf, size_t size) {
  const size_t n = location(buf, size);
  return n > 0 && n < size;
}

/* Why a location of `len` bytes cannot be used; the kernel refuses paths
 * of PATH_MAX bytes or more (ENAMETOOLONG). */
static void too_long_reason(const char *start, size_t len, char *msg,
                            size_t msg_size) {
  snprintf(msg, msg_size,
           "the tuning cache path (%.48s...) is %zu bytes, longer than "
           "PATH_MAX (%d): results are kept in memory only (set "
           "VOXCONV_BENCHMARK_CACHE_DIR to a shorter folder)",
           start, len, PATH_MAX);
}

/* Creates the folders of file_path. On failure errno says why and `bad`
 * names the component (a regular file where a folder should be gives
 * ENOTDIR, which mkdir reports as EEXIST). */
static int mkdir_p(const char *file_path, char *bad, size_t bad_size) {
  char dir[VC_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", file_path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir)
    return 0;
  *slash = '\0';
  for (char *p = dir + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    const char was = *p;
    *p = '\0';
    struct stat st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
      snprintf(bad, bad_size, "%s", dir);
      return -1;
    }
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
      snprintf(bad, bad_size, "%s", dir);
      errno = ENOTDIR;
      return -1;
    }
    if (was == '\0')
      return 0;
    *p = '/';
  }
}

/* Says why path cannot be opened: for ENOTDIR the component that is not a
 * folder, else the system's reason. */
static void describe_open_error(const char *path, int err_no, char *msg,
                                size_t msg_size) {
  if (err_no == ENOTDIR) {
    char dir[VC_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *slash = strrchr(dir, '/'); slash && slash != dir;
         slash = strrchr(dir, '/')) {
      *slash = '\0';
      struct stat st;
      if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(msg, msg_size, "cannot open: %s is not a directory", dir);
        return;
      }
    }
  }
  snprintf(msg, msg_size, "cannot open: %s", strerror(err_no));
}

/* The file that path names after following symbolic links (relative ones
 * from the link's folder); path itself when it is no link. The target
 * need not exist. Saves write there, so that a link stays a link. */
static int resolve_links(const char *path, char *out, size_t size) {
  char cur[VC_PATH_MAX], next[VC_PATH_MAX];
  snprintf(cur, sizeof cur, "%s", path);
  for (int i = 0; i < VC_MAX_LINKS; i++) {
    struct stat st;
    if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
      if (strlen(cur) >= size)
        return -1;
      snprintf(out, size, "%s", cur);
      return 0;
    }
    const ssize_t n = readlink(cur, next, sizeof next - 1);
    if (n <= 0)
      return -1;
    next[n] = '\0';
    if (next[0] == '/') {
      memcpy(cur, next, (size_t)n + 1);
      continue;
    }
    char *slash = strrchr(cur, '/');
    const size_t keep = slash ? (size_t)(slash - cur) + 1 : 0;
    if (keep + (size_t)n >= sizeof cur)
      return -1;
    memcpy(cur + keep, next, (size_t)n + 1);
  }
  errno = ELOOP;
  return -1;
}

static void stamp_of(const char *path, file_stamp_t *st) {
  struct stat s;
  memset(st, 0, sizeof *st);
  if (stat(path, &s) != 0)
    return;
  st->exists = 1;
  st->dev = s.st_dev;
  st->ino = s.st_ino;
  st->size = s.st_size;
  st->mtime = s.st_mtim;
}

static int stamp_equal(const file_stamp_t *a, const file_stamp_t *b) {
  if (a->exists != b->exists)
    return 0;
  if (!a->exists)
    return 1;
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtime.tv_sec == b->mtime.tv_sec &&
         a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* ---- reading ---------------------------------------------------------- */
/* 1 = parsed into db; 0 = no file (db empty); -1 = corrupt; -2 = cannot
 * be read (permissions, a folder that is not one): not corrupt, so never
 * set aside. db is empty unless 1; err says why. */
#define VC_UNREADABLE (-2)
static int read_file(const char *path, vc_cache_db_t *db, file_stamp_t *st,
                     char *err, size_t err_size) {
  vc_cache_db_init(db);
  if (st)
    stamp_of(path, st);
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT)
      return 0;
    describe_open_error(path, errno, err, err_size);
    return VC_UNREADABLE;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = (char *)malloc(cap);
  int rc = 1;
  while (buf) {
    if (len == cap) {
      if (cap >= VC_CACHE_FILE_LIMIT) {
        snprintf(err, err_size, "larger than %zu bytes", VC_CACHE_FILE_LIMIT);
        rc = -1;
        break;
      }
      char *nb = (char *)realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0)
      break;
  }
  if (!buf) {
    snprintf(err, err_size, "out of memory reading it");
    rc = -1;
  } else if (rc == 1 && ferror(f)) {
    /* EISDIR (the file is a folder) or EIO: nothing to set aside */
    snprintf(err, err_size, "cannot read: %s", strerror(errno));
    rc = VC_UNREADABLE;
  }
  fclose(f);
  if (rc == 1 && vc_cache_db_parse(db, buf, len, err, err_size) != 0)
    rc = -1;
  free(buf);
  return rc;
}

static int lock_file(const char *path) {
  char lock_path[VC_PATH_MAX + 8];
  snprintf(lock_path, sizeof lock_path, "%s.lock", path);
  int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

static void unlock_file(int fd) {
  if (fd >= 0) {
    flock(fd, LOCK_UN);
    close(fd);
  }
}

/* Renames a corrupt file out of the way (caller holds the file lock) and
 * says so once. */
static void set_aside(const char *path, const char *why) {
  char aside[VC_PATH_MAX + 64];
  snprintf(aside, sizeof aside, "%s.corrupt-%ld-%ld", path, (long)getpid(),
           (long)time(NULL));
  const int moved = rename(path, aside) == 0;
  char once[VC_PATH_MAX + 16];
  snprintf(once, sizeof once, "corrupt:%s", path);
  if (moved)
    vc_tune_warn_once(once,
                      "tuning cache %s is corrupt (%s); moved to %s, "
                      "rebuilding it",
                      path, why, aside);
  else
    vc_tune_warn_once(once,
                      "tuning cache %s is corrupt (%s) and could not be "
                      "moved aside (%s); it will be overwritten",
                      path, why, strerror(errno));
}

/* Loads g_path into g_db (g_mu held). A corrupt file is re-checked under
 * the file lock (another process may just have replaced it) and then set
 * aside. */
static void load_locked(void) {
  bump_generation();
  vc_cache_db_free(&g_db);
  char err[VC_PATH_MAX + 64];
  int rc = read_file(g_path, &g_db, &g_stamp, err, sizeof err);
  if (rc == -1) {
    char target[VC_PATH_MAX];
    if (resolve_links(g_path, target, sizeof target) != 0)
      snprintf(target, sizeof target, "%s", g_path);
    int fd = lock_file(target);
    rc = read_file(g_path, &g_db, &g_stamp, err, sizeof err);
    if (rc == -1) {
      set_aside(target, err);
      stamp_of(g_path, &g_stamp);
    }
    unlock_file(fd);
  }
  if (rc == VC_UNREADABLE) {
    char once[VC_PATH_MAX + 16];
    snprintf(once, sizeof once, "unreadable:%s", g_path);
    vc_tune_warn_once(once,
                      "tuning cache %s: %s; the file is left as it is and "
                      "this process keeps its tuning results in memory",
                      g_path, err);
  }
}

/* Makes g_db reflect the current path (g_mu held). Returns 0 when no
 * location is known (caching off). */
static int ensure_loaded_locked(void) {
  char path[VC_PATH_MAX];
  const size_t len = location(path, sizeof path);
  if (len == 0)
    return 0;
  if (g_loaded && strcmp(path, g_path) == 0)
    return 1;
  /* A new location (the environment changed): start over from its file.
   * Unsaved results of the old location were flushed by the caller. */
  snprintf(g_path, sizeof g_path, "%s", path);
  g_path_len = len;
  g_loaded = 1;
  g_pending = 0;
  if (len < sizeof g_path) {
    load_locked();
  } else { /* memory only: no file can be opened at that path */
    vc_cache_db_free(&g_db);
    bump_generation();
    memset(&g_stamp, 0, sizeof g_stamp);
    char msg[512];
    too_long_reason(g_path, len, msg, sizeof msg);
    vc_tune_warn_once("cache-save-failed", "%s", msg);
  }
  return 1;
}

static int any_dirty_locked(void) {
  for (int i = 0; i < g_db.n; i++)
    if (g_db.entries[i].dirty)
      return 1;
  return 0;
}

/* Called before touching the table: if the location changed while results
 * are unsaved, save them to the old location first. */
static void flush_if_moved(void) {
  char path[VC_PATH_MAX];
  int moved = 0;
  if (location(path, sizeof path) == 0)
    return;
  pthread_mutex_lock(&g_mu);
  moved = g_loaded && strcmp(path, g_path) != 0 && any_dirty_locked();
  pthread_mutex_unlock(&g_mu);
  if (moved) {
    char msg[256];
    vc_cache_save_now(msg, sizeof msg);
  }
}

/* ---- saving ----------------------------------------------------------- */
static int write_all(int fd, const char *buf, size_t len) {
  size_t done = 0;
  const size_t half = len / 2;
  while (done < len) {
    size_t chunk = len - done;
    if (vc_cache_test_slow_write_us > 0 && done < half)
      chunk = half - done;
    ssize_t w = write(fd, buf + done, chunk);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    done += (size_t)w;
    if (vc_cache_test_slow_write_us > 0 && done == half)
      usleep((useconds_t)vc_cache_test_slow_write_us);
  }
  return 0;
}

/* Brings what is on disk into the process table (g_mu held). */
static void merge_saved_db(vc_cache_db_t *dst, const vc_cache_db_t *disk) {
  for (int i = 0; i < disk->n; i++) {
    const vc_cache_entry_t *s = &disk->entries[i];
    vc_cache_entry_t *d = vc_cache_db_upsert(dst, s->ns, &s->key);
    if (d)
      vc_cache_entry_merge_saved(d, s);
  }
}

/* 1 if name is "<base>.tmp.<pid>.<n>" (as save_locked names them). */
static int temporary_pid(const char *name, const char *base, long *pid) {
  const size_t n = strlen(base);
  if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0)
    return 0;
  const char *p = name + n + 5;
  char *end = NULL;
  errno = 0;
  *pid = strtol(p, &end, 10);
  if (errno || end == p || *pid <= 0 || *end != '.')
    return 0;
  p = end + 1;
  (void)strtoul(p, &end, 10);
  return end != p && *end == '\0';
}

/* Removes temporary files that writers killed mid-save left beside
 * target (file lock held, so no writer of this library is mid-save): those
 * whose process is gone, and any older than VC_STALE_TMP_SECONDS (the pid
 * may belong to another process now, or the writer to another host). */
static void remove_stale_temporaries(const char *target) {
  char dir[VC_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", target);
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : target;
  if (slash)
    *slash = '\0';
  DIR *d = opendir(slash ? (dir[0] ? dir : "/") : ".");
  if (!d)
    return;
  const time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    long pid;
    if (!temporary_pid(de->d_name, base, &pid) || pid == (long)getpid())
      continue;
    char file[VC_PATH_MAX + 256];
    snprintf(file, sizeof file, "%s/%s", slash ? dir : ".", de->d_name);
    struct stat st;
    if (stat(file, &st) != 0)
      continue;
    const int gone = kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (gone || now - st.st_mtime > VC_STALE_TMP_SECONDS)
      unlink(file);
  }
  closedir(d);
}

/* g_save_mu held. */
static int save_locked(char *msg, size_t msg_size) {
  if (msg_size)
    msg[0] = '\0';
  vc_cache_db_t mine, disk;
  vc_cache_db_init(&mine);
  char path[VC_PATH_MAX];

  pthread_mutex_lock(&g_mu);
  g_pending = 0;
  if (!g_loaded || !any_dirty_locked()) {
    pthread_mutex_unlock(&g_mu);
    return 0;
  }
  if (g_path_len >= sizeof g_path) { /* the rows stay dirty, in memory */
    too_long_reason(g_path, g_path_len, msg, msg_size);
    pthread_mutex_unlock(&g_mu);
    return -1;
  }
  snprintf(path, sizeof path, "%s", g_path);
  /* Only what this process measured goes out: rows it merely read from the
   * file may be stale copies of another process's newer ones. */
  int oom = 0;
  for (int i = 0; i < g_db.n && !oom; i++) {
    vc_cache_entry_t *e = &g_db.entries[i];
    if (!e->dirty)
      continue;
    vc_cache_entry_t *m = vc_cache_db_upsert(&mine, e->ns, &e->key);
    if (!m) {
      oom = 1;
      break;
    }
    m->coverage = e->coverage;
    for (int r = 0; r < e->n_rows && !oom; r++)
      if (e->rows[r].dirty && vc_cache_entry_put_row(m, &e->rows[r]) != 0)
        oom = 1;
  }
  if (!oom)
    for (int i = 0; i < g_db.n; i++) {
      vc_cache_entry_t *e = &g_db.entries[i];
      e->dirty = 0;
      for (int r = 0; r < e->n_rows; r++)
        e->rows[r].dirty = 0;
    }
  pthread_mutex_unlock(&g_mu);
  if (oom) {
    vc_cache_db_free(&mine);
    snprintf(msg, msg_size, "out of memory preparing the tuning cache");
    return -1;
  }

  int rc = -1;
  int fd = -1;
  char *text = NULL;
  char tmp[VC_PATH_MAX + 64], target[VC_PATH_MAX], bad[VC_PATH_MAX];
  tmp[0] = '\0';
  vc_cache_db_init(&disk);
  file_stamp_t st;
  /* Through a symbolic link: lock, write and rename beside the real file,
   * so the link is kept and keeps seeing every update. */
  if (resolve_links(path, target, sizeof target) != 0) {
    snprintf(msg, msg_size, "cannot follow the symbolic link %s: %s", path,
             strerror(errno));
    goto out;
  }
  if (mkdir_p(target, bad, sizeof bad) != 0) {
    if (errno == ENOTDIR)
      snprintf(msg, msg_size,
               "cannot create the folder of %s: %s is not a "
               "directory",
               target, bad);
    else
      snprintf(msg, msg_size, "cannot create the folder of %s: %s", target,
               strerror(errno));
    goto out;
  }
  fd = lock_file(target);
  if (fd < 0) {
    snprintf(msg, msg_size, "cannot lock %s.lock: %s", target, strerror(errno));
    goto out;
  }
  char err[VC_PATH_MAX + 64];
  const int read_rc = read_file(target, &disk, NULL, err, sizeof err);
  if (read_rc == VC_UNREADABLE) {
    /* Replacing it would drop entries this process cannot see. */
    snprintf(msg, msg_size,
             "%s: %s; the file is not replaced and this "
             "process keeps its results in memory",
             path, err);
    goto out;
  }
  if (read_rc < 0) {
    set_aside(target, err);
    vc_cache_db_free(&disk);
  }
  remove_stale_temporaries(target);
  if (vc_cache_db_merge(&disk, &mine, 1, 0) != 0 ||
      !(text = vc_cache_db_serialize(&disk, NULL))) {
    snprintf(msg, msg_size, "out of memory writing the tuning cache");
    goto out;
  }
  static unsigned counter;
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", target, (long)getpid(), counter++);
  int out_fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out_fd < 0) {
    snprintf(msg, msg_size, "cannot create %s: %s", tmp, strerror(errno));
    tmp[0] = '\0';
    goto out;
  }
  /* fsync before rename: after a crash the name points at either the old
   * or the complete new file, never at an empty one. */
  if (write_all(out_fd, text, strlen(text)) != 0 || fsync(out_fd) != 0) {
    snprintf(msg, msg_size, "cannot write %s: %s", tmp, strerror(errno));
    close(out_fd);
    goto out;
  }
  close(out_fd);
  if (rename(tmp, target) != 0) {
    snprintf(msg, msg_size, "cannot rename %s to %s: %s", tmp, target,
             strerror(errno));
    goto out;
  }
  tmp[0] = '\0';
  stamp_of(path, &st);
  rc = 0;
out:
  if (tmp[0])
    unlink(tmp);
  unlock_file(fd);
  free(text);
  pthread_mutex_lock(&g_mu);
  if (g_loaded && strcmp(path, g_path) == 0) {
    if (rc == 0) {
      /* What other processes saved becomes visible here too; rows this
       * process measured during the save (dirty again) stay. */
      merge_saved_db(&g_db, &disk);
      bump_generation();
      g_stamp = st;
    } else {
      /* Keep the results for a later attempt. */
      for (int i = 0; i < mine.n; i++) {
        const vc_cache_entry_t *m = &mine.entries[i];
        vc_cache_entry_t *e = vc_cache_db_find(&g_db, m->ns, &m->key);
        if (!e)
          continue;
        e->dirty = 1;
        for (int r = 0; r < m->n_rows; r++) {
          vc_cache_row_t *row = (vc_cache_row_t *)vc_cache_entry_find_row(
              e, m->rows[r].algo, m->rows[r].params);
          if (row)
            row->dirty = 1;
        }
      }
    }
  }
  pthread_mutex_unlock(&g_mu);
  vc_cache_db_free(&disk);
  vc_cache_db_free(&mine);
  return rc;
}

int vc_cache_save_now(char *msg, size_t msg_size) {
  ensure_init();
  pthread_mutex_lock(&g_save_mu);
  int rc = save_locked(msg, msg_size);
  pthread_mutex_unlock(&g_save_mu);
  return rc;
}

static void *saver_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (!g_pending && !g_saver_stop)
      pthread_cond_wait(&g_cond, &g_mu);
    if (g_saver_stop)
      break;
    pthread_mutex_unlock(&g_mu);
    /* Let a burst of results (one network's layers) land in one write. */
    struct timespec ts = {0, VC_SAVE_DEBOUNCE_MS * 1000000L};
    nanosleep(&ts, NULL);
    char msg[512];
    if (vc_cache_save_now(msg, sizeof msg) != 0)
      vc_tune_warn_once("cache-save-failed",
                        "could not save the tuning cache: %s", msg);
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static void at_exit_save(void) {
  pthread_mutex_lock(&g_mu);
  g_saver_stop = 1;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_mu);
  char msg[512];
  if (vc_cache_save_now(msg, sizeof msg) != 0)
    vc_tune_warn_once("cache-save-failed",
                      "could not save the tuning cache at exit: %s", msg);
}

/* g_mu held. */
static void wake_saver_locked(void) {
  if (!g_atexit_registered) {
    g_atexit_registered = 1;
    atexit(at_exit_save);
  }
  g_pending = 1;
  if (!g_saver_started && !g_saver_stop) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Without a thread the results still reach the file at exit. */
    if (pthread_create(&th, &attr, saver_main, NULL) == 0)
      g_saver_started = 1;
    pthread_attr_destroy(&attr);
  }
  pthread_cond_signal(&g_cond);
}

/* ---- the table -------------------------------------------------------- */
int vc_cache_get(const char *ns, const vc_cache_key_t *key, int reload_on_miss,
                 vc_cache_entry_t *out) {
  ensure_init();
  flush_if_moved();
  int found = 0;
  pthread_mutex_lock(&g_mu);
  if (ensure_loaded_locked()) {
    vc_cache_entry_t *e = vc_cache_db_find(&g_db, ns, key);
    if (!e && reload_on_miss && g_path_len < sizeof g_path) {
      /* Another process (a training rank) may have tuned it meanwhile. */
      file_stamp_t now;
      stamp_of(g_path, &now);
      if (!stamp_equal(&now, &g_stamp)) {
        vc_cache_db_t disk;
        char err[256];
        if (read_file(g_path, &disk, &now, err, sizeof err) > 0) {
          merge_saved_db(&g_db, &disk);
          bump_generation();
          g_stamp = now;
        }
        vc_cache_db_free(&disk);
        e = vc_cache_db_find(&g_db, ns, key);
      }
    }
    if (e && vc_cache_entry_copy(out, e) == 0)
      found = 1;
  }
  pthread_mutex_unlock(&g_mu);
  return found;
}

void vc_cache_put(const vc_cache_entry_t *src) {
  ensure_init();
  flush_if_moved();
  pthread_mutex_lock(&g_mu);
  if (ensure_loaded_locked()) {
    vc_cache_entry_t *e = vc_cache_db_upsert(&g_db, src->ns, &src->key);
    int ok = e != NULL;
    for (int r = 0; ok && r < src->n_rows; r++) {
      vc_cache_row_t row = src->rows[r];
      row.dirty = 1;
      ok = vc_cache_entry_put_row(e, &row) == 0;
    }
    if (ok) {
      e->coverage |= src->coverage;
      vc_cache_entry_sort(e);
      e->dirty = 1;
      bump_generation();
      wake_saver_locked();
    }
  }
  pthread_mutex_unlock(&g_mu);
}

int vc_cache_recommend_for(const char *ns, const vc_cache_key_t *like,
                           vc_cache_row_t *out, int max) {
  ensure_init();
  int n = 0;
  pthread_mutex_lock(&g_mu);
  if (ensure_loaded_locked())
    n = vc_cache_recommend(&g_db, ns, like, 0.05, 2, out, max);
  pthread_mutex_unlock(&g_mu);
  return n;
}

void vc_cache_forget(void) {
  ensure_init();
  pthread_mutex_lock(&g_mu);
  vc_cache_db_free(&g_db);
  g_loaded = 0;
  g_pending = 0;
  memset(&g_stamp, 0, sizeof g_stamp);
  bump_generation();
  pthread_mutex_unlock(&g_mu);
}

/* ---- public API ------------------------------------------------------- */
voxconv_status_t voxconv_cache_path(char *path, size_t size) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, path, "path");
  char buf[VC_PATH_MAX];
  const size_t len = location(buf, sizeof buf);
  if (len == 0)
    return vc_fail(NULL, VOXCONV_STATUS_IO_ERROR,
                   "voxconv_cache_path: no location for the tuning cache "
                   "(set VOXCONV_BENCHMARK_CACHE_DIR or HOME)");
  if (len >= sizeof buf) {
    char msg[512];
    too_long_reason(buf, len, msg, sizeof msg);
    return vc_fail(NULL, VOXCONV_STATUS_IO_ERROR, "voxconv_cache_path: %s",
                   msg);
  }
  if (strlen(buf) >= size)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_cache_path: the path needs %zu bytes, size=%zu",
                   strlen(buf) + 1, size);
  memcpy(path, buf, strlen(buf) + 1);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_cache_flush(void) {
  vc_clear_error(NULL);
  char msg[512];
  if (vc_cache_save_now(msg, sizeof msg) != 0)
    return vc_fail(NULL, VOXCONV_STATUS_IO_ERROR, "voxconv_cache_flush: %s",
                   msg);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_cache_clear(void) {
  vc_clear_error(NULL);
  ensure_init();
  char path[VC_PATH_MAX];
  pthread_mutex_lock(&g_save_mu);
  pthread_mutex_lock(&g_mu);
  vc_cache_db_free(&g_db);
  g_loaded = 0;
  g_pending = 0;
  bump_generation();
  pthread_mutex_unlock(&g_mu);
  voxconv_status_t st = VOXCONV_STATUS_SUCCESS;
  char target[VC_PATH_MAX];
  /* A symbolic link stays: what it points to is the cache file. */
  if (vc_cache_current_path(path, sizeof path) &&
      resolve_links(path, target, sizeof target) == 0) {
    struct stat s;
    if (stat(target, &s) == 0) {
      int fd = lock_file(target);
      if (unlink(target) != 0 && errno != ENOENT)
        st = vc_fail(NULL, VOXCONV_STATUS_IO_ERROR,
                     "voxconv_cache_clear: cannot delete %s: %s", target,
                     strerror(errno));
      unlock_file(fd);
    }
  }
  pthread_mutex_unlock(&g_save_mu);
  return st;
}

struct voxconv_cache {
  vc_cache_db_t db;
};

voxconv_status_t voxconv_cache_open(const char *path, voxconv_cache_t **cache) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, cache, "cache");
  *cache = NULL;
  char buf[VC_PATH_MAX];
  if (!path) {
    VC_CHECK(voxconv_cache_path(buf, sizeof buf));
    path = buf;
  }
  voxconv_cache_t *c = (voxconv_cache_t *)calloc(1, sizeof *c);
  if (!c)
    return vc_fail(NULL, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_cache_open: out of host memory");
  char err[256];
  if (read_file(path, &c->db, NULL, err, sizeof err) < 0) {
    free(c);
    return vc_fail(NULL, VOXCONV_STATUS_IO_ERROR, "voxconv_cache_open: %s: %s",
                   path, err);
  }
  *cache = c;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_cache_close(voxconv_cache_t *cache) {
  if (cache) {
    vc_cache_db_free(&cache->db);
    free(cache);
  }
  return VOXCONV_STATUS_SUCCESS;
}

int voxconv_cache_entry_count(const voxconv_cache_t *cache) {
  return cache ? cache->db.n : 0;
}

static voxconv_status_t check_index(const voxconv_cache_t *cache, int index,
                                    const char *fn) {
  VC_CHECK_NULL(NULL, cache, "cache");
  if (index < 0 || index >= cache->db.n)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "%s: entry %d outside 0..%d", fn, index, cache->db.n - 1);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_cache_get_entry(const voxconv_cache_t *cache,
                                         int index,
                                         voxconv_cache_entry_info_t *info) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, info, "info");
  VC_CHECK(check_index(cache, index, "voxconv_cache_get_entry"));
  const vc_cache_entry_t *e = &cache->db.entries[index];
  memset(info, 0, sizeof *info);
  snprintf(info->namespace_name, sizeof info->namespace_name, "%s", e->ns);
  info->pass = (voxconv_pass_t)vc_cache_ns_pass(e->ns, info->algo_namespace,
                                                sizeof info->algo_namespace);
  vc_cache_key_format(&e->key, info->key, sizeof info->key);
  snprintf(info->device, sizeof info->device, "%s", e->key.device);
  snprintf(info->library_version, sizeof info->library_version, "%s",
           e->key.lib);
  info->n_in_log2 = e->key.nin;
  info->n_out_log2 = e->key.nout;
  info->cin = e->key.cin;
  info->cout = e->key.cout;
  info->kernel_volume = e->key.kvol;
  info->dtype = (voxconv_dtype_t)e->key.dtype;
  info->fp16_accum = e->key.acc;
  info->deterministic = e->key.det;
  info->mode = (voxconv_kmap_mode_t)e->key.mode;
  for (int i = 0; i < 3; i++)
    info->stride[i] = e->key.stride[i];
  vc_cache_coverage_format(e->coverage, info->searched, sizeof info->searched);
  info->n_candidates = e->n_rows;
  return VOXCONV_STATUS_SUCCESS;
}

static void row_to_candidate(const vc_cache_row_t *r,
                             voxconv_cache_candidate_t *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->algo, sizeof c->algo, "%s", r->algo);
  snprintf(c->params, sizeof c->params, "%s", r->params);
  c->time_ms = r->time_ms;
  snprintf(c->status, sizeof c->status, "%s", r->status);
  c->max_rel = r->max_rel;
}

voxconv_status_t voxconv_cache_get_candidate(const voxconv_cache_t *cache,
                                             int index, int rank,
                                             voxconv_cache_candidate_t *cand) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, cand, "cand");
  VC_CHECK(check_index(cache, index, "voxconv_cache_get_candidate"));
  const vc_cache_entry_t *e = &cache->db.entries[index];
  if (rank < 0 || rank >= e->n_rows)
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_cache_get_candidate: rank %d outside 0..%d of "
                   "entry %d",
                   rank, e->n_rows - 1, index);
  row_to_candidate(&e->rows[rank], cand);
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t voxconv_cache_recommend(const voxconv_cache_t *cache,
                                         int index,
                                         voxconv_cache_candidate_t *cands,
                                         int max, int *count) {
  vc_clear_error(NULL);
  VC_CHECK_NULL(NULL, count, "count");
  *count = 0;
  VC_CHECK(check_index(cache, index, "voxconv_cache_recommend"));
  if (max < 0 || (max > 0 && !cands))
    return vc_fail(NULL, VOXCONV_STATUS_INVALID_ARGUMENT,
                   "voxconv_cache_recommend: max=%d with cands=%p", max,
                   (void *)cands);
  if (max == 0)
    return VOXCONV_STATUS_SUCCESS;
  vc_cache_row_t *rows = (vc_cache_row_t *)malloc((size_t)max * sizeof *rows);
  if (!rows)
    return vc_fail(NULL, VOXCONV_STATUS_ALLOC_FAILED,
                   "voxconv_cache_recommend: out of host memory");
  const vc_cache_entry_t *e = &cache->db.entries[index];
  const int n =
      vc_cache_recommend(&cache->db, e->ns, &e->key, 0.05, 2, rows, max);
  for (int i = 0; i < n; i++)
    row_to_candidate(&rows[i], &cands[i]);
  free(rows);
  *count = n;
  return VOXCONV_STATUS_SUCCESS;
}
