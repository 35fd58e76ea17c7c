/* Runs a fuzz target's entry point over files (the seed corpus and the
 * regression inputs) and over deterministic mutations of them, for
 * compilers without libFuzzer: a bounded, reproducible smoke run of the
 * same checks. Usage:
 *   <target>_replay [--mutations N] [--artifact PREFIX] FILE_OR_DIR ...
 * When an input crashes the target (a failed check, a sanitizer report, a
 * signal), it is written to PREFIX<name>-crash (default ./replay-crash)
 * and its path and bytes are printed, so the failure can be replayed
 * from the CI log alone. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* Present in sanitizer builds: called before the process dies of a
 * report. Weak, so that the runner links without sanitizers too. */
void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The input being run, for the crash report. */
static const unsigned char *g_input;
static size_t g_input_len;
static char g_artifact[4096] = "./replay-crash";
static const char *g_origin = "";

/* Async-signal-safe: write(2) only. */
static void put_str(const char *s) {
  if (write(2, s, strlen(s)) < 0)
    return;
}

static void report_crash(void) {
  static int reported;
  if (reported++ || !g_input)
    return;
  const int fd = open(g_artifact, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    size_t done = 0;
    while (done < g_input_len) {
      const ssize_t w = write(fd, g_input + done, g_input_len - done);
      if (w <= 0)
        break;
      done += (size_t)w;
    }
    close(fd);
  }
  put_str("\n== crashing input (from ");
  put_str(g_origin);
  put_str(", or a mutation of it) written to ");
  put_str(g_artifact);
  put_str("; replay it with this program and that file; bytes:\n");
  static const char hex[] = "0123456789abcdef";
  char line[4 * 32 + 2];
  const size_t shown = g_input_len < 4096 ? g_input_len : 4096;
  for (size_t i = 0; i < shown; i += 32) {
    size_t n = 0;
    for (size_t j = i; j < i + 32 && j < shown; j++) {
      const unsigned char c = g_input[j];
      if (c >= 0x20 && c < 0x7f && c != '\\') {
        line[n++] = (char)c;
      } else {
        line[n++] = '\\';
        line[n++] = 'x';
        line[n++] = hex[c >> 4];
        line[n++] = hex[c & 15];
      }
    }
    line[n++] = '\n';
    if (write(2, line, n) < 0)
      break;
  }
  if (shown < g_input_len)
    put_str("... (the file has the rest)\n");
}

static void on_signal(int sig) {
  report_crash();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void run_one(const unsigned char *data, size_t len) {
  g_input = data;
  g_input_len = len;
  LLVMFuzzerTestOneInput(data, len);
  g_input = NULL;
}

static int run_file(const char *path, long mutations) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = n >= 0 ? malloc((size_t)n + 64) : NULL;
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  if (!buf)
    return 0;
  g_origin = path;
  run_one(buf, got);
  unsigned char *m = malloc(got + 64);
  for (long i = 0; m && i < mutations; i++) {
    size_t len = got;
    memcpy(m, buf, got);
    const int edits = 1 + (int)(next() % 4);
    for (int e = 0; e < edits && len; e++) {
      const size_t at = (size_t)(next() % len);
      switch (next() % 4) {
      case 0:
        m[at] = (unsigned char)next();
        break; /* flip */
      case 1:
        len = at;
        break; /* truncate */
      case 2:
        m[at] = (unsigned char)"\n \"=,-#0"[next() % 8];
        break;
      default: /* duplicate */
        if (len + 8 < got + 64) {
          memmove(m + at + 8, m + at, len - at);
          len += 8;
        }
      }
    }
    run_one(m, len);
  }
  free(m);
  free(buf);
  return 1;
}

int main(int argc, char **argv) {
  long mutations = 2000;
  int files = 0;
  if (__sanitizer_set_death_callback)
    __sanitizer_set_death_callback(report_crash);
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGABRT, on_signal);
  signal(SIGFPE, on_signal);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--mutations") == 0 && i + 1 < argc) {
      mutations = strtol(argv[++i], NULL, 10);
      continue;
    }
    if (strcmp(argv[i], "--artifact") == 0 && i + 1 < argc) {
      snprintf(g_artifact, sizeof g_artifact, "%s", argv[++i]);
      continue;
    }
    struct stat st;
    if (stat(argv[i], &st) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      DIR *d = opendir(argv[i]);
      struct dirent *de;
      while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
          continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
        files += run_file(path, mutations);
      }
      if (d)
        closedir(d);
    } else {
      files += run_file(argv[i], mutations);
    }
  }
  printf("replayed %d files with %ld mutations each: no crash\n", files,
         mutations);
  return files > 0 ? 0 : 1;
}
