/* Algorithm selection: which algorithm strings apply to a call (options,
 * then environment), their grammar, and parameter strings. Works for any
 * record in the registry (src/ops/algo.c) and for records tests add. */
#include "vc_tune.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- registry view ---------------------------------------------------- */
static const vc_algo_t *const *g_extra;
static int g_n_extra;
int vc_tune_extra_first;

void vc_tune_set_extra_algos(const vc_algo_t *const *algos, int n) {
  g_extra = n > 0 ? algos : NULL;
  g_n_extra = n > 0 ? n : 0;
}

int vc_tune_algo_count(void) {
  return vc_algo_table_size() + g_n_extra;
}

const vc_algo_t *vc_tune_algo_at(int index) {
  const int n_reg = vc_algo_table_size();
  if (vc_tune_extra_first) {
    if (index >= 0 && index < g_n_extra)
      return g_extra[index];
    return vc_algo_at(index - g_n_extra);
  }
  if (index < n_reg)
    return vc_algo_at(index);
  index -= n_reg;
  return (index >= 0 && index < g_n_extra) ? g_extra[index] : NULL;
}

static int is_depthwise(voxconv_pass_t pass) {
  return pass == VOXCONV_PASS_DEPTHWISE_FWD ||
         pass == VOXCONV_PASS_DEPTHWISE_DGRAD ||
         pass == VOXCONV_PASS_DEPTHWISE_WGRAD;
}

static const vc_algo_t *find_exact(const char *name) {
  for (int i = 0; i < vc_tune_algo_count(); i++) {
    const vc_algo_t *a = vc_tune_algo_at(i);
    if (strcasecmp(a->info.name, name) == 0)
      return a;
  }
  return NULL;
}

const vc_algo_t *vc_tune_algo_find(const char *name, voxconv_pass_t pass) {
  const vc_algo_t *a = find_exact(name);
  if (a || !is_depthwise(pass))
    return a;
  /* Depthwise has its own short names (the "explicit"/"implicit"). */
  if (strcasecmp(name, "explicit") == 0)
    return find_exact("depthwise_explicit");
  if (strcasecmp(name, "implicit") == 0)
    return find_exact("depthwise_implicit");
  return NULL;
}

void vc_valid_algo_names(voxconv_pass_t pass, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
#define VC_APPEND(s)                                                           \
  do {                                                                         \
    int n_ = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", (s)); \
    if (n_ > 0 && (size_t)n_ < size - used)                                    \
      used += (size_t)n_;                                                      \
  } while (0)
  for (int i = 0; i < vc_tune_algo_count(); i++) {
    const vc_algo_t *a = vc_tune_algo_at(i);
    if (vc_algo_has_pass(a, pass))
      VC_APPEND(a->info.name);
  }
  if (is_depthwise(pass)) {
    if (find_exact("depthwise_explicit"))
      VC_APPEND("explicit");
    if (find_exact("depthwise_implicit"))
      VC_APPEND("implicit");
  }
  VC_APPEND("auto");
  VC_APPEND("all");
#undef VC_APPEND
}

/* ---- where the text comes from ---------------------------------------- */
static int blank(const char *s) {
  if (!s)
    return 1;
  while (isspace((unsigned char)*s))
    s++;
  return *s == '\0';
}

const char *vc_algo_mode_text(const voxconv_conv_options_t *opt,
                              voxconv_pass_t pass, const char **source) {
  const char *call = NULL, *call_name = NULL;
  const char *env1 = NULL, *env2 = NULL;
  switch (pass) {
  case VOXCONV_PASS_CONV_FWD:
    if (opt)
      call = opt->fwd_algo, call_name = "opt->fwd_algo";
    env1 = "VOXCONV_FWD_ALGO_MODE";
    break;
  case VOXCONV_PASS_CONV_DGRAD:
    if (opt && !blank(opt->dgrad_algo))
      call = opt->dgrad_algo, call_name = "opt->dgrad_algo";
    else if (opt)
      call = opt->bwd_algo, call_name = "opt->bwd_algo";
    env1 = "VOXCONV_DGRAD_ALGO_MODE";
    env2 = "VOXCONV_BWD_ALGO_MODE";
    break;
  case VOXCONV_PASS_CONV_WGRAD:
    if (opt && !blank(opt->wgrad_algo))
      call = opt->wgrad_algo, call_name = "opt->wgrad_algo";
    else if (opt)
      call = opt->bwd_algo, call_name = "opt->bwd_algo";
    env1 = "VOXCONV_WGRAD_ALGO_MODE";
    env2 = "VOXCONV_BWD_ALGO_MODE";
    break;
  case VOXCONV_PASS_DEPTHWISE_FWD:
    if (opt)
      call = opt->fwd_algo, call_name = "opt->fwd_algo";
    env1 = "VOXCONV_DEPTHWISE_CONV_FWD_ALGO_MODE";
    break;
  case VOXCONV_PASS_DEPTHWISE_DGRAD:
  case VOXCONV_PASS_DEPTHWISE_WGRAD: {
    const int dgrad = pass == VOXCONV_PASS_DEPTHWISE_DGRAD;
    const char *specific =
        opt ? (dgrad ? opt->dgrad_algo : opt->wgrad_algo) : NULL;
    if (opt && !blank(specific))
      call = specific,
      call_name = dgrad ? "opt->dgrad_algo" : "opt->wgrad_algo";
    else if (opt)
      call = opt->bwd_algo, call_name = "opt->bwd_algo";
    env1 = "VOXCONV_DEPTHWISE_CONV_BWD_ALGO_MODE";
    break;
  }
  default:
    break;
  }
  if (!blank(call)) {
    *source = call_name;
    return call;
  }
  const char *v = env1 ? vc_getenv(env1) : NULL;
  if (!blank(v)) {
    *source = env1;
    return v;
  }
  v = env2 ? vc_getenv(env2) : NULL;
  if (!blank(v)) {
    *source = env2;
    return v;
  }
  *source = "default";
  return NULL;
}

/* ---- grammar ---------------------------------------------------------- */
static const char *trim(const char *s, const char *end, const char **out_end) {
  while (s < end && isspace((unsigned char)*s))
    s++;
  while (end > s && isspace((unsigned char)end[-1]))
    end--;
  *out_end = end;
  return s;
}

static int word_is(const char *s, const char *e, const char *word) {
  const size_t n = (size_t)(e - s);
  return strlen(word) == n && strncasecmp(s, word, n) == 0;
}

static voxconv_status_t bad_mode(const voxconv_handle_t *h, const char *text,
                                 voxconv_pass_t pass, const char *source,
                                 const char *problem) {
  char names[512];
  vc_valid_algo_names(pass, names, sizeof names);
  return vc_fail(
      h, VOXCONV_STATUS_INVALID_ARGUMENT,
      "%s='%s' for %s: %s; valid: a name, a list [a,b], auto or "
      "all, with names %s%s",
      source, text, vc_cache_pass_namespace((int)pass), problem, names,
      voxconv_has_cuda() ? ""
                         : " (this library was built without CUDA, so GPU "
                           "algorithms are not registered)");
}

static voxconv_status_t add_name(const voxconv_handle_t *h, const char *text,
                                 voxconv_pass_t pass, const char *source,
                                 const char *s, const char *e,
                                 vc_algo_selection_t *sel) {
  char name[VC_CACHE_ALGO_MAX];
  char problem[160];
  if (s == e)
    return bad_mode(h, text, pass, source, "an empty algorithm name");
  if (word_is(s, e, "auto") || word_is(s, e, "all"))
    return bad_mode(h, text, pass, source,
                    "auto and all cannot be list elements");
  if ((size_t)(e - s) >= sizeof name)
    return bad_mode(h, text, pass, source, "an algorithm name too long");
  for (const char *c = s; c < e; c++)
    if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-' && *c != '.') {
      snprintf(problem, sizeof problem,
               "'%c' cannot appear in an algorithm name%s", *c,
               *c == ',' ? " (write a list as [a,b])" : "");
      return bad_mode(h, text, pass, source, problem);
    }
  memcpy(name, s, (size_t)(e - s));
  name[e - s] = '\0';
  const vc_algo_t *a = vc_tune_algo_find(name, pass);
  if (!a) {
    snprintf(problem, sizeof problem, "unknown algorithm '%s'", name);
    return bad_mode(h, text, pass, source, problem);
  }
  if (!vc_algo_has_pass(a, pass)) {
    snprintf(problem, sizeof problem,
             "algorithm '%s' does not implement this pass", a->info.name);
    return bad_mode(h, text, pass, source, problem);
  }
  for (int i = 0; i < sel->n; i++)
    if (sel->algos[i] == a)
      return VOXCONV_STATUS_SUCCESS; /* repeats are harmless */
  if (sel->n == VC_SEL_MAX_ALGOS)
    return bad_mode(h, text, pass, source, "too many algorithms");
  sel->algos[sel->n++] = a;
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_parse_algo_mode(const voxconv_handle_t *h, const char *text,
                                    voxconv_pass_t pass, const char *source,
                                    vc_algo_selection_t *sel) {
  memset(sel, 0, sizeof *sel);
  vc_copy_text(sel->source, sizeof sel->source, source ? source : "?");
  sel->mode = VC_SEL_AUTO;
  if (blank(text))
    return VOXCONV_STATUS_SUCCESS;
  const char *e;
  const char *s = trim(text, text + strlen(text), &e);
  if (word_is(s, e, "auto"))
    return VOXCONV_STATUS_SUCCESS;
  if (word_is(s, e, "all")) {
    sel->mode = VC_SEL_ALL;
    return VOXCONV_STATUS_SUCCESS;
  }
  sel->mode = VC_SEL_LIST;
  if (*s != '[') {
    if (memchr(s, ']', (size_t)(e - s)))
      return bad_mode(h, text, pass, source, "']' without '['");
    return add_name(h, text, pass, source, s, e, sel);
  }
  if (e[-1] != ']' || e - s < 2)
    return bad_mode(h, text, pass, source, "a list without its closing ']'");
  const char *inner = s + 1, *inner_end = e - 1;
  const char *ie;
  inner = trim(inner, inner_end, &ie);
  if (inner == ie)
    return bad_mode(h, text, pass, source, "an empty list");
  for (const char *c = inner; c < ie; c++)
    if (*c == '[' || *c == ']')
      return bad_mode(h, text, pass, source, "nested or stray brackets");
  const char *p = inner;
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(ie - p));
    const char *pe = comma ? comma : ie;
    const char *ne;
    const char *ns = trim(p, pe, &ne);
    VC_CHECK(add_name(h, text, pass, source, ns, ne, sel));
    if (!comma)
      break;
    p = comma + 1;
  }
  return VOXCONV_STATUS_SUCCESS;
}

voxconv_status_t vc_algo_selection_for(const voxconv_handle_t *h,
                                       const voxconv_conv_options_t *opt,
                                       voxconv_pass_t pass,
                                       vc_algo_selection_t *sel) {
  const char *source = NULL;
  const char *text = vc_algo_mode_text(opt, pass, &source);
  return vc_parse_algo_mode(h, text, pass, source, sel);
}

/* ---- parameters ------------------------------------------------------- */
static const vc_param_space_t *space_of(const vc_algo_t *a,
                                        voxconv_pass_t pass) {
  const vc_param_space_t *s = a->param_space ? a->param_space(pass) : NULL;
  return (s && s->n > 0) ? s : NULL;
}

static int space_n(const vc_param_space_t *s) {
  return s->n < VC_MAX_PARAMS ? s->n : VC_MAX_PARAMS;
}

void vc_params_format(const vc_algo_t *a, voxconv_pass_t pass,
                      const vc_algo_params_t *params, char *buf, size_t size) {
  const vc_param_space_t *s = space_of(a, pass);
  if (!s) {
    snprintf(buf, size, "-");
    return;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < space_n(s); i++) {
    int n = snprintf(buf + used, size - used, "%s%s=%d", i ? "," : "",
                     s->names[i] ? s->names[i] : "p", (int)params->v[i]);
    if (n < 0 || (size_t)n >= size - used)
      break;
    used += (size_t)n;
  }
}

static int value_allowed(const vc_param_space_t *s, int i, int32_t v) {
  if (s->n_values[i] <= 0)
    return v == 0;
  for (int j = 0; j < s->n_values[i] && j < VC_MAX_PARAM_VALUES; j++)
    if (s->values[i][j] == v)
      return 1;
  return 0;
}

int vc_params_parse(const vc_algo_t *a, voxconv_pass_t pass, const char *text,
                    vc_algo_params_t *params) {
  memset(params, 0, sizeof *params);
  const vc_param_space_t *s = space_of(a, pass);
  if (!s)
    return strcmp(text, "-") == 0;
  char expect[VC_CACHE_PARAMS_MAX];
  const char *p = text;
  for (int i = 0; i < space_n(s); i++) {
    if (i) {
      if (*p != ',')
        return 0;
      p++;
    }
    snprintf(expect, sizeof expect, "%s=", s->names[i] ? s->names[i] : "p");
    const size_t n = strlen(expect);
    if (strncmp(p, expect, n) != 0)
      return 0;
    p += n;
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || v < INT32_MIN || v > INT32_MAX)
      return 0;
    if (!value_allowed(s, i, (int32_t)v))
      return 0;
    params->v[i] = (int32_t)v;
    p = end;
  }
  return *p == '\0';
}

int vc_params_f16_accum(const vc_algo_t *a, voxconv_pass_t pass,
                        const vc_algo_params_t *params) {
  const vc_param_space_t *s = space_of(a, pass);
  if (!s)
    return 0;
  for (int i = 0; i < space_n(s); i++)
    if (s->names[i] && strcmp(s->names[i], VC_PARAM_ACCUMULATOR) == 0)
      return params->v[i] == VC_ACCUM_F16 || params->v[i] == 16;
  return 0;
}

int vc_params_enumerate(const vc_algo_t *a, voxconv_pass_t pass,
                        vc_algo_params_t *out, int max) {
  if (max <= 0)
    return 0;
  const vc_param_space_t *s = space_of(a, pass);
  if (!s) {
    memset(&out[0], 0, sizeof out[0]);
    return 1;
  }
  const int np = space_n(s);
  int counts[VC_MAX_PARAMS], idx[VC_MAX_PARAMS] = {0};
  for (int i = 0; i < np; i++) {
    counts[i] = s->n_values[i];
    if (counts[i] < 1)
      counts[i] = 1;
    if (counts[i] > VC_MAX_PARAM_VALUES)
      counts[i] = VC_MAX_PARAM_VALUES;
  }
  int n = 0;
  for (;;) {
    vc_algo_params_t *p = &out[n++];
    memset(p, 0, sizeof *p);
    for (int i = 0; i < np; i++)
      p->v[i] = s->n_values[i] > 0 ? s->values[i][idx[i]] : 0;
    if (n == max)
      return n;
    /* first parameter fastest: it is the one that matters most (the
     * tile), so a truncated enumeration (auto's spread) covers every tile
     * at the other parameters' first values before it varies those */
    int i = 0;
    while (i < np && ++idx[i] == counts[i])
      idx[i++] = 0;
    if (i == np)
      return n;
  }
}
