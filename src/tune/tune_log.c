/* Tuner output on stderr: the progress line and documented warnings (the
 * library's only output; never stdout). Warnings are deduplicated for the
 * life of the process so that a per-call problem is reported once. */
#include "vc_tune.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define VC_WARN_SLOTS 256

static pthread_mutex_t g_warn_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_warned[VC_WARN_SLOTS];
static int g_n_warned;

FILE *vc_tune_stream(void) {
  return stderr;
}

int vc_tune_log_enabled(void) {
  const char *v = vc_getenv("VOXCONV_AUTOTUNE_LOG");
  return !v || vc_parse_bool(v) != 0;
}

static uint64_t hash_text(const char *s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001B3ull;
  }
  return h;
}

void vc_tune_warn_once(const char *once_key, const char *fmt, ...) {
  char text[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  const uint64_t h = hash_text(once_key ? once_key : text);
  pthread_mutex_lock(&g_warn_mu);
  for (int i = 0; i < g_n_warned; i++) {
    if (g_warned[i] == h) {
      pthread_mutex_unlock(&g_warn_mu);
      return;
    }
  }
  /* Past the table's size warnings repeat rather than vanish. */
  if (g_n_warned < VC_WARN_SLOTS)
    g_warned[g_n_warned++] = h;
  pthread_mutex_unlock(&g_warn_mu);
  fprintf(vc_tune_stream(), "voxconv: warning: %s\n", text);
  fflush(vc_tune_stream());
}
