/* Synthetic LiDAR scene: see synth_scene.h for what it models and why. */
#include "synth_scene.h"

#include "tool_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCENE_MAX_BOXES 1024
#define SCENE_MAX_CYLINDERS 512
#define SCENE_MAX_SPHERES 256

static const double k_pi = 3.14159265358979323846;
static const double k_ground_z = -1.73; /* sensor height of the KITTI car */
static const double k_max_range = 120.0;

typedef struct box3 {
  double lo[3], hi[3];
  double porous_depth; /* 0: solid; else mean penetration (m), vegetation */
} box3_t;

typedef struct vcylinder { /* vertical: axis along z */
  double cx, cy, r, z0, z1;
} vcylinder_t;

typedef struct sphere {
  double c[3], r;
  double porous_depth; /* as for boxes: tree crowns let rays in */
} sphere_t;

typedef struct scene {
  box3_t boxes[SCENE_MAX_BOXES];
  vcylinder_t cylinders[SCENE_MAX_CYLINDERS];
  sphere_t spheres[SCENE_MAX_SPHERES];
  int n_boxes, n_cylinders, n_spheres;
} scene_t;

typedef struct size_params {
  const char *name;
  int beams;
  double elev_lo_deg, elev_hi_deg; /* vertical field of view */
  int azimuth_steps;               /* per revolution */
  int copies;                      /* replicated +i m in y, like workload A */
} size_params_t;

/* Beam layouts of real sensors: VLP-16, HDL-32E, HDL-64E, and a 128-beam
 * head (Ouster OS-128 / Hesai class) for the large, workload-A-sized cloud. */
static const size_params_t k_sizes[4] = {
    {"tiny", 16, -15.0, 15.0, 512, 1},
    {"small", 32, -30.67, 10.67, 1024, 1},
    {"medium", 64, -24.9, 2.0, 2048, 1},
    {"large", 128, -25.0, 15.0, 4096, 8},
};

int vt_scene_size_from_name(const char *name, vt_scene_size_t *size) {
  for (int i = 0; i < 4; i++)
    if (name && strcmp(name, k_sizes[i].name) == 0) {
      *size = (vt_scene_size_t)i;
      return 1;
    }
  return 0;
}

const char *vt_scene_size_name(vt_scene_size_t size) {
  return (size >= VT_SCENE_TINY && size <= VT_SCENE_LARGE) ? k_sizes[size].name
                                                           : "?";
}

static void add_box(scene_t *s, double x0, double y0, double z0, double x1,
                    double y1, double z1) {
  if (s->n_boxes == SCENE_MAX_BOXES)
    return;
  box3_t *b = &s->boxes[s->n_boxes++];
  b->lo[0] = x0, b->lo[1] = y0, b->lo[2] = z0;
  b->hi[0] = x1, b->hi[1] = y1, b->hi[2] = z1;
  b->porous_depth = 0.0;
}

/* A hedge or bush: rays enter and stop at a random depth, which gives the
 * volumetric clutter real vegetation returns. */
static void add_hedge(scene_t *s, double x0, double y0, double z0, double x1,
                      double y1, double z1, double depth) {
  add_box(s, x0, y0, z0, x1, y1, z1);
  if (s->n_boxes > 0)
    s->boxes[s->n_boxes - 1].porous_depth = depth;
}

static void add_cylinder(scene_t *s, double cx, double cy, double r, double z0,
                         double z1) {
  if (s->n_cylinders == SCENE_MAX_CYLINDERS)
    return;
  vcylinder_t *c = &s->cylinders[s->n_cylinders++];
  c->cx = cx, c->cy = cy, c->r = r, c->z0 = z0, c->z1 = z1;
}

static void add_sphere(scene_t *s, double x, double y, double z, double r,
                       double porous_depth) {
  if (s->n_spheres == SCENE_MAX_SPHERES)
    return;
  sphere_t *p = &s->spheres[s->n_spheres++];
  p->c[0] = x, p->c[1] = y, p->c[2] = z, p->r = r;
  p->porous_depth = porous_depth;
}

/* A car centred at (x, y), long axis along x (along_x) or y. */
static void add_car(scene_t *s, double x, double y, int along_x) {
  const double g = k_ground_z;
  const double hl = 2.2, hw = 0.9;    /* body half length / width */
  const double cl = 1.2, cw = 0.8;    /* cabin */
  if (along_x) {
    add_box(s, x - hl, y - hw, g + 0.3, x + hl, y + hw, g + 1.0);
    add_box(s, x - cl + 0.2, y - cw, g + 1.0, x + cl + 0.2, y + cw, g + 1.5);
  } else {
    add_box(s, x - hw, y - hl, g + 0.3, x + hw, y + hl, g + 1.0);
    add_box(s, x - cw, y - cl + 0.2, g + 1.0, x + cw, y + cl + 0.2, g + 1.5);
  }
}

static const double k_cross_x[2] = {-45.0, 25.0}; /* cross streets */

static int near_cross_street(double x0, double x1, double margin) {
  for (int i = 0; i < 2; i++)
    if (x1 > k_cross_x[i] - margin && x0 < k_cross_x[i] + margin)
      return 1;
  return 0;
}

/* Lays out the street. Fixed seed: the same scene every run. */
static void build_scene(scene_t *s) {
  vt_rng_t rng = {0x5CE4E5EEDull};
  const double g = k_ground_z;
  memset(s, 0, sizeof *s);
  for (int side = -1; side <= 1; side += 2) {
    /* Building blocks along the main street (x axis), with gaps wide
     * enough to see the second row behind them. */
    for (double x = -80.0; x < 80.0;) {
      const double len = vt_rng_range(&rng, 8.0, 25.0);
      if (near_cross_street(x, x + len, 9.0)) {
        x += 3.0;
        continue;
      }
      const double setback = vt_rng_range(&rng, 10.0, 14.0);
      const double depth = vt_rng_range(&rng, 8.0, 16.0);
      const double height = vt_rng_range(&rng, 3.0, 16.0);
      const double y0 = side > 0 ? setback : -setback - depth;
      add_box(s, x, y0, g, x + len, y0 + depth, g + height);
      x += len + vt_rng_range(&rng, 3.0, 14.0);
    }
    /* Second row: taller blocks 35..75 m out. */
    for (double x = -80.0; x < 80.0;) {
      const double len = vt_rng_range(&rng, 10.0, 30.0);
      const double setback = vt_rng_range(&rng, 35.0, 50.0);
      const double depth = vt_rng_range(&rng, 10.0, 25.0);
      const double y0 = side > 0 ? setback : -setback - depth;
      add_box(s, x, y0, g, x + len, y0 + depth,
              g + vt_rng_range(&rng, 6.0, 25.0));
      x += len + vt_rng_range(&rng, 4.0, 12.0);
    }
    /* Hedges along the front gardens. */
    for (double x = -78.0; x < 78.0; x += vt_rng_range(&rng, 6.0, 14.0)) {
      if (near_cross_street(x, x, 8.0) || vt_rng_uniform(&rng) < 0.4)
        continue;
      const double len = vt_rng_range(&rng, 2.0, 6.0);
      const double y0 = side * vt_rng_range(&rng, 9.6, 10.0);
      add_hedge(s, x, fmin(y0, y0 + side * 0.8), g, x + len,
                fmax(y0, y0 + side * 0.8), g + vt_rng_range(&rng, 0.8, 1.8),
                0.35);
    }
    /* Parked cars at the kerb, moving cars in the lanes. */
    for (double x = -78.0; x < 78.0; x += vt_rng_range(&rng, 5.5, 11.0)) {
      if (vt_rng_uniform(&rng) < 0.55 && !near_cross_street(x, x, 7.0))
        add_car(s, x, side * vt_rng_range(&rng, 5.6, 6.4), 1);
    }
    for (int k = 0; k < 4; k++) {
      double x = vt_rng_range(&rng, -70.0, 70.0);
      if (fabs(x) < 6.0)
        x += x < 0 ? -8.0 : 8.0; /* not on top of the ego car */
      add_car(s, x, side * 1.9, 1);
    }
    /* Poles and trees on the pavement. */
    for (double x = -78.0; x < 78.0; x += vt_rng_range(&rng, 12.0, 20.0))
      add_cylinder(s, x, side * 8.4, 0.12, g, g + 7.0);
    for (double x = -76.0; x < 76.0; x += vt_rng_range(&rng, 9.0, 16.0)) {
      if (near_cross_street(x, x, 6.0))
        continue;
      const double trunk_h = vt_rng_range(&rng, 2.0, 3.0);
      const double crown = vt_rng_range(&rng, 1.4, 2.4);
      add_cylinder(s, x, side * 9.2, vt_rng_range(&rng, 0.15, 0.25), g,
                   g + trunk_h);
      add_sphere(s, x, side * 9.2, g + trunk_h + 0.7 * crown, crown, 0.6);
    }
    /* Pedestrians: thin cylinders on the pavement. */
    for (int k = 0; k < 6; k++)
      add_cylinder(s, vt_rng_range(&rng, -60.0, 60.0),
                   side * vt_rng_range(&rng, 7.0, 9.8), 0.25, g, g + 1.75);
    /* Buildings, trees and parked cars along both cross streets. */
    for (int c = 0; c < 2; c++) {
      const double xc = k_cross_x[c];
      for (int dir = -1; dir <= 1; dir += 2)
        for (double y = 14.0; y < 80.0;) {
          const double len = vt_rng_range(&rng, 8.0, 22.0);
          const double setback = vt_rng_range(&rng, 9.0, 12.0);
          const double depth = vt_rng_range(&rng, 8.0, 14.0);
          const double height = vt_rng_range(&rng, 3.0, 14.0);
          const double x0 = side > 0 ? xc + setback : xc - setback - depth;
          const double ya = dir * y, yb = dir * (y + len);
          add_box(s, x0, fmin(ya, yb), g, x0 + depth, fmax(ya, yb),
                  g + height);
          if (vt_rng_uniform(&rng) < 0.6)
            add_car(s, xc + side * 5.8, dir * (y + 0.5 * len), 0);
          if (vt_rng_uniform(&rng) < 0.7) {
            const double crown = vt_rng_range(&rng, 1.5, 3.0);
            const double ty = dir * (y + vt_rng_range(&rng, 0.0, len));
            add_cylinder(s, xc + side * 7.5, ty, 0.2, g, g + 2.5);
            add_sphere(s, xc + side * 7.5, ty, g + 2.5 + 0.7 * crown, crown,
                       0.6);
          }
          y += len + vt_rng_range(&rng, 3.0, 10.0);
        }
    }
  }
}

/* Where a ray that entered a porous volume at t_in stops: exponential
 * penetration, or passes through if that lies beyond t_out. */
static double porous_hit(vt_rng_t *rng, double t_in, double t_out,
                         double mean_depth) {
  const double t = t_in - mean_depth * log(1.0 - vt_rng_uniform(rng));
  return t < t_out ? t : -1.0;
}

/* Nearest hit of the ray o + t d (|d| = 1) over the scene; -1 if none.
 * rng drives vegetation penetration (deterministic in ray order). */
static double cast_ray(const scene_t *s, const double o[3], const double d[3],
                       vt_rng_t *rng) {
  double best = k_max_range;
  if (d[2] < -1e-9) {
    const double t = (k_ground_z - o[2]) / d[2];
    if (t > 0 && t < best)
      best = t;
  }
  for (int i = 0; i < s->n_boxes; i++) { /* slab test */
    const box3_t *b = &s->boxes[i];
    double t0 = 0.0, t1 = best;
    int hit = 1;
    for (int a = 0; a < 3 && hit; a++) {
      if (fabs(d[a]) < 1e-12) {
        if (o[a] < b->lo[a] || o[a] > b->hi[a])
          hit = 0;
        continue;
      }
      double ta = (b->lo[a] - o[a]) / d[a], tb = (b->hi[a] - o[a]) / d[a];
      if (ta > tb) {
        const double tmp = ta;
        ta = tb;
        tb = tmp;
      }
      if (ta > t0)
        t0 = ta;
      if (tb < t1)
        t1 = tb;
      if (t0 > t1)
        hit = 0;
    }
    if (!hit || t0 <= 1e-6 || t0 >= best)
      continue;
    if (b->porous_depth > 0) {
      const double t = porous_hit(rng, t0, t1, b->porous_depth);
      if (t > 0 && t < best)
        best = t;
    } else {
      best = t0;
    }
  }
  const double axy = d[0] * d[0] + d[1] * d[1];
  if (axy > 1e-12)
    for (int i = 0; i < s->n_cylinders; i++) {
      const vcylinder_t *c = &s->cylinders[i];
      const double px = o[0] - c->cx, py = o[1] - c->cy;
      const double bq = 2.0 * (d[0] * px + d[1] * py);
      const double cq = px * px + py * py - c->r * c->r;
      const double disc = bq * bq - 4.0 * axy * cq;
      if (disc < 0)
        continue;
      const double t = (-bq - sqrt(disc)) / (2.0 * axy);
      if (t <= 1e-6 || t >= best)
        continue;
      const double z = o[2] + t * d[2];
      if (z >= c->z0 && z <= c->z1)
        best = t;
    }
  for (int i = 0; i < s->n_spheres; i++) {
    const sphere_t *p = &s->spheres[i];
    const double q[3] = {o[0] - p->c[0], o[1] - p->c[1], o[2] - p->c[2]};
    const double bq = d[0] * q[0] + d[1] * q[1] + d[2] * q[2];
    const double cq = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] - p->r * p->r;
    const double disc = bq * bq - cq;
    if (disc < 0)
      continue;
    const double t_in = -bq - sqrt(disc), t_out = -bq + sqrt(disc);
    if (t_in <= 1e-6 || t_in >= best)
      continue;
    const double t = p->porous_depth > 0
                         ? porous_hit(rng, t_in, t_out, p->porous_depth)
                         : t_in;
    if (t > 0 && t < best)
      best = t;
  }
  return best < k_max_range ? best : -1.0;
}

/* Approximately N(0,1) from the generator (Box-Muller). */
static double rng_normal(vt_rng_t *r) {
  const double u1 = 1.0 - vt_rng_uniform(r), u2 = vt_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * k_pi * u2);
}

static int in_workload_a_box(double x, double y, double z) {
  return x >= -80.0 && x < 80.0 && y >= -80.0 && y < 80.0 && z >= -2.0 &&
         z < 6.0;
}

int vt_synth_scene(vt_scene_size_t size, float **xyz, int64_t *n_points,
                   char *description, size_t description_len) {
  *xyz = NULL;
  *n_points = 0;
  if (size < VT_SCENE_TINY || size > VT_SCENE_LARGE)
    size = VT_SCENE_SMALL;
  const size_params_t *p = &k_sizes[size];
  scene_t *s = (scene_t *)malloc(sizeof *s);
  const size_t max_rays = (size_t)p->beams * (size_t)p->azimuth_steps;
  float *sweep = (float *)malloc(max_rays * 3 * sizeof(float));
  if (!s || !sweep) {
    free(s);
    free(sweep);
    return -1;
  }
  build_scene(s);
  vt_rng_t rng = {0xB0A710ull + (uint64_t)size};
  size_t n_sweep = 0;
  const double o[3] = {0.0, 0.0, 0.0};
  for (int b = 0; b < p->beams; b++) {
    const double elev =
        (p->elev_lo_deg + (p->elev_hi_deg - p->elev_lo_deg) * b /
                              (p->beams > 1 ? p->beams - 1 : 1)) *
        k_pi / 180.0;
    /* Real heads fire their lasers at slightly staggered azimuths. */
    const double stagger = 2.0 * k_pi * ((b * 7) % 16) / (16.0 * p->azimuth_steps);
    for (int a = 0; a < p->azimuth_steps; a++) {
      const double az = 2.0 * k_pi * a / p->azimuth_steps + stagger;
      const double d[3] = {cos(elev) * cos(az), cos(elev) * sin(az), sin(elev)};
      const double t = cast_ray(s, o, d, &rng);
      const double noise = 0.015 * rng_normal(&rng);
      const double drop = vt_rng_uniform(&rng);
      if (t < 0 || drop < 0.03)
        continue;
      const double r = t + noise;
      sweep[3 * n_sweep + 0] = (float)(r * d[0]);
      sweep[3 * n_sweep + 1] = (float)(r * d[1]);
      sweep[3 * n_sweep + 2] = (float)(r * d[2]);
      n_sweep++;
    }
  }
  free(s);
  float *out = (float *)malloc((n_sweep * (size_t)p->copies + 1) * 3 *
                               sizeof(float));
  if (!out) {
    free(sweep);
    return -1;
  }
  int64_t n = 0;
  for (int c = 0; c < p->copies; c++)
    for (size_t i = 0; i < n_sweep; i++) {
      const float x = sweep[3 * i], y = sweep[3 * i + 1] + (float)c,
                  z = sweep[3 * i + 2];
      if (!in_workload_a_box(x, y, z))
        continue;
      out[3 * n + 0] = x;
      out[3 * n + 1] = y;
      out[3 * n + 2] = z;
      n++;
    }
  free(sweep);
  *xyz = out;
  *n_points = n;
  if (description && description_len)
    snprintf(description, description_len,
             "synthetic lidar street scene '%s': %d beams x %d azimuth "
             "steps, %d cop%s (copy i shifted +i m in y, as workload A), "
             "%lld points in [-80,80)x[-80,80)x[-2,6) m",
             p->name, p->beams, p->azimuth_steps, p->copies,
             p->copies > 1 ? "ies" : "y", (long long)n);
  return 0;
}
