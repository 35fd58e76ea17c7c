/* Environment variables: one place that reads them and parses booleans. */
#include "vc_core.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *vc_getenv(const char *name) {
  const char *v = getenv(name);
  return (v && v[0]) ? v : NULL;
}

int vc_parse_bool(const char *s) {
  if (!s)
    return -1;
  while (isspace((unsigned char)*s))
    s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1]))
    n--;
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strlen(yes[i]) == n && strncasecmp(s, yes[i], n) == 0)
      return 1;
    if (strlen(no[i]) == n && strncasecmp(s, no[i], n) == 0)
      return 0;
  }
  return -1;
}

int vc_parse_nonneg(const char *s, double *out) {
  if (!s)
    return -1;
  char *end = NULL;
  const double v = strtod(s, &end);
  while (end && isspace((unsigned char)*end))
    end++;
  if (end == s || !end || *end != '\0' || !isfinite(v) || v < 0)
    return -1;
  *out = v;
  return 0;
}
