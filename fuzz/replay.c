/* Runs the fuzz target's entry point over files (the seed corpus) and over
 * deterministic mutations of them, for compilers without libFuzzer: a
 * bounded, reproducible smoke run of the same checks. Usage:
 *   fuzz_cache_reader_replay [--mutations N] FILE_OR_DIR ... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int run_file(const char *path, long mutations) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)n + 64);
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  if (!buf)
    return 0;
  LLVMFuzzerTestOneInput(buf, got);
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
    LLVMFuzzerTestOneInput(m, len);
  }
  free(m);
  free(buf);
  return 1;
}

int main(int argc, char **argv) {
  long mutations = 2000;
  int files = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--mutations") == 0 && i + 1 < argc) {
      mutations = strtol(argv[++i], NULL, 10);
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
