/* A deterministic synthetic LiDAR-like scene, generated in code, so that
 * `voxconv bench` has a realistic default input without any data file.
 *
 * A spinning multi-beam lidar at the origin (1.73 m above a flat ground, as
 * on the KITTI car) is ray-cast against a procedurally laid-out street:
 * ground plane, building blocks along a main street and two cross streets,
 * parked and moving cars (body + cabin boxes), poles, trees (trunk +
 * canopy) and pedestrians. Ranges get a little noise and a few returns are
 * dropped, from a fixed-seed generator, so the cloud looks like a sensor's
 * and is the same on every run.
 *
 * The geometry matches BENCHMARKS.md workload A: points are kept in
 * [-80,80) x [-80,80) x [-2,6) m and meant to be voxelized at 0.1 m with
 * origin (-80,-80,-2) on a 1600 x 1600 x 80 grid. "large" replicates the
 * sweep 8 times shifted by +i m in y, exactly as workload A replicates its
 * recorded cloud, and lands near its ~0.9M voxels. */
#ifndef VOXCONV_TOOL_SYNTH_SCENE_H
#define VOXCONV_TOOL_SYNTH_SCENE_H

#include <stddef.h>
#include <stdint.h>

typedef enum vt_scene_size {
  VT_SCENE_TINY = 0,   /* 16 beams: a few thousand voxels (tests) */
  VT_SCENE_SMALL = 1,  /* 32 beams: a few 10k voxels (CPU default) */
  VT_SCENE_MEDIUM = 2, /* 64 beams: ~100k voxels */
  VT_SCENE_LARGE = 3   /* 128 beams, x8 copies: ~0.9M voxels (GPU default) */
} vt_scene_size_t;

/* Voxel grid of workload A, which the scene is laid out for. */
#define VT_SCENE_VOXEL 0.1f
#define VT_SCENE_ORIGIN_X (-80.0f)
#define VT_SCENE_ORIGIN_Y (-80.0f)
#define VT_SCENE_ORIGIN_Z (-2.0f)
#define VT_SCENE_GRID_XY 1600
#define VT_SCENE_GRID_Z 80

/* "tiny", "small", "medium", "large" -> size; 0 if unknown. */
int vt_scene_size_from_name(const char *name, vt_scene_size_t *size);
const char *vt_scene_size_name(vt_scene_size_t size);

/* Generates the scene: *xyz gets malloc'd float32 [*n_points][3] (free()
 * it). description (may be NULL) gets a one-line summary. Returns 0, or -1
 * if out of memory. */
int vt_synth_scene(vt_scene_size_t size, float **xyz, int64_t *n_points,
                   char *description, size_t description_len);

#endif
