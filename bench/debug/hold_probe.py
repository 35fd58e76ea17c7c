"""Probe the side-stream ordering on a held stream."""
import sys, torch
from voxconv import kmap as K
sys.path.insert(0, "bench/debug")
orig = K.KernelMap._first_use
def traced(self, handle):
    print("first_use", hex(handle.stream), "last", hex(self._last_user), "users", [hex(u) for u in self._users],
          "ready", self.ready is not None, "build stream", hex(self.handle.stream))
    return orig(self, handle)
K.KernelMap._first_use = traced
mode = sys.argv[1] if len(sys.argv) > 1 else "trace"
if mode == "sync":
    def synced(self, handle):
        orig(self, handle); torch.cuda.synchronize()
    K.KernelMap._first_use = synced
import runpy
runpy.run_path("bench/debug/hold_mismatch.py", run_name="__main__")
