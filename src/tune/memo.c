/* The per-handle memo of tuning decisions (see vc_tune.h). A small table
 * of recent calls, replaced round robin: a network has a few dozen layer
 * shapes, and a miss only costs the full lookup it replaces. */
#include "vc_tune.h"

#include <stdlib.h>
#include <string.h>

#define VC_MEMO_SLOTS 64

typedef struct memo_slot {
  int used;
  unsigned gen;
  vc_tune_memo_key_t key;
  vc_tune_memo_value_t value;
} memo_slot_t;

typedef struct memo {
  memo_slot_t slot[VC_MEMO_SLOTS];
  int next; /* the slot the next new key replaces */
} memo_t;

/* The key's bytes that take part in comparisons: the selection list only
 * up to n_sel (the rest is not initialised by every caller). */
static int same_key(const vc_tune_memo_key_t *a, const vc_tune_memo_key_t *b) {
  return a->pass == b->pass && a->mode == b->mode && a->n_sel == b->n_sel &&
         memcmp(a->sel, b->sel, (size_t)a->n_sel * sizeof a->sel[0]) == 0 &&
         memcmp(&a->key, &b->key, sizeof a->key) == 0;
}

static memo_slot_t *find_slot(const memo_t *m, const vc_tune_memo_key_t *k) {
  if (!m)
    return NULL;
  for (int i = 0; i < VC_MEMO_SLOTS; i++)
    if (m->slot[i].used && same_key(&m->slot[i].key, k))
      return (memo_slot_t *)&m->slot[i];
  return NULL;
}

int vc_tune_memo_find(const voxconv_handle_t *h, const vc_tune_memo_key_t *k,
                      vc_tune_memo_value_t *v) {
  const memo_slot_t *s = find_slot((const memo_t *)h->tune_memo, k);
  if (!s || s->gen != vc_cache_generation())
    return 0;
  *v = s->value;
  return 1;
}

void vc_tune_memo_store(voxconv_handle_t *h, const vc_tune_memo_key_t *k,
                        const vc_tune_memo_value_t *v, unsigned gen) {
  memo_t *m = (memo_t *)h->tune_memo;
  if (!m) {
    m = (memo_t *)calloc(1, sizeof *m);
    if (!m)
      return;
    h->tune_memo = m;
  }
  memo_slot_t *s = find_slot(m, k);
  if (!s) {
    s = &m->slot[m->next];
    m->next = (m->next + 1) % VC_MEMO_SLOTS;
  }
  memset(s, 0, sizeof *s);
  s->used = 1;
  s->gen = gen;
  s->key.pass = k->pass;
  s->key.mode = k->mode;
  s->key.n_sel = k->n_sel;
  memcpy(s->key.sel, k->sel, (size_t)k->n_sel * sizeof k->sel[0]);
  s->key.key = k->key;
  s->value = *v;
}

void vc_tune_memo_drop(voxconv_handle_t *h, const vc_tune_memo_key_t *k) {
  memo_slot_t *s = find_slot((memo_t *)h->tune_memo, k);
  if (s)
    s->used = 0;
}
