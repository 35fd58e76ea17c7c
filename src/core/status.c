/* Status names and the last-error message (per handle, or per thread for
 * calls that have no handle). */
#include "vc_core.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char vc_thread_error[VC_ERROR_MAX];

const char *voxconv_status_string(voxconv_status_t status) {
  switch (status) {
  case VOXCONV_STATUS_SUCCESS: return "VOXCONV_STATUS_SUCCESS";
  case VOXCONV_STATUS_NULL_POINTER: return "VOXCONV_STATUS_NULL_POINTER";
  case VOXCONV_STATUS_INVALID_ARGUMENT: return "VOXCONV_STATUS_INVALID_ARGUMENT";
  case VOXCONV_STATUS_OUT_OF_RANGE: return "VOXCONV_STATUS_OUT_OF_RANGE";
  case VOXCONV_STATUS_DUPLICATE_COORDS: return "VOXCONV_STATUS_DUPLICATE_COORDS";
  case VOXCONV_STATUS_SHAPE_MISMATCH: return "VOXCONV_STATUS_SHAPE_MISMATCH";
  case VOXCONV_STATUS_DTYPE_MISMATCH: return "VOXCONV_STATUS_DTYPE_MISMATCH";
  case VOXCONV_STATUS_KMAP_MISMATCH: return "VOXCONV_STATUS_KMAP_MISMATCH";
  case VOXCONV_STATUS_UNSUPPORTED: return "VOXCONV_STATUS_UNSUPPORTED";
  case VOXCONV_STATUS_ALLOC_FAILED: return "VOXCONV_STATUS_ALLOC_FAILED";
  case VOXCONV_STATUS_BACKEND_UNAVAILABLE: return "VOXCONV_STATUS_BACKEND_UNAVAILABLE";
  case VOXCONV_STATUS_CUDA_ERROR: return "VOXCONV_STATUS_CUDA_ERROR";
  case VOXCONV_STATUS_IO_ERROR: return "VOXCONV_STATUS_IO_ERROR";
  case VOXCONV_STATUS_INTERNAL: return "VOXCONV_STATUS_INTERNAL";
  }
  return "VOXCONV_STATUS_UNKNOWN";
}

/* The handle is logically const for callers (querying state), but the error
 * buffer is diagnostic state that every call may update. */
static char *error_buffer(const voxconv_handle_t *h) {
  return h ? ((voxconv_handle_t *)h)->last_error : vc_thread_error;
}

voxconv_status_t vc_failv(const voxconv_handle_t *h, voxconv_status_t status,
                          const char *fmt, va_list ap) {
  vsnprintf(error_buffer(h), VC_ERROR_MAX, fmt, ap);
  return status;
}

voxconv_status_t vc_fail(const voxconv_handle_t *h, voxconv_status_t status,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vc_failv(h, status, fmt, ap);
  va_end(ap);
  return status;
}

void vc_clear_error_only(const voxconv_handle_t *h) {
  error_buffer(h)[0] = '\0';
}

void vc_clear_error(const voxconv_handle_t *h) {
  if (h && h->worker)
    vc_build_worker_drain((voxconv_handle_t *)h);
  error_buffer(h)[0] = '\0';
}

const char *voxconv_get_last_error(const voxconv_handle_t *h) {
  return error_buffer(h);
}

unsigned voxconv_version_number(void) { return VOXCONV_VERSION_NUMBER; }
const char *voxconv_version_string(void) { return VOXCONV_VERSION_STRING; }
