"""``python3 -m voxconv``: prints voxconv.info() (which library was loaded,
its CUDA targets, the devices it sees); ``--json`` for machines."""

import json
import sys

import voxconv


def main(argv):
    info = voxconv.info()
    if "--json" in argv:
        print(json.dumps(info, indent=2))
        return 0
    archs = info["cuda_archs"]
    print(f"voxconv {info['version']} (library {info['library_version']})")
    print(f"library: {info['library_path']}")
    print(f"torch: {info['torch']} (CUDA {info['torch_cuda']})")
    if not info["cuda"]:
        print("CUDA: not built in (CPU backend only)")
    else:
        print("CUDA targets: " + (" ".join(archs) if archs is not None
                                  else "unknown (library predates voxconv_cuda_archs)"))
    if "devices_error" in info:
        print(f"CUDA devices: query failed: {info['devices_error']}")
    elif info["cuda"]:
        print(f"CUDA devices: {len(info['devices']) or 'none found'}")
    for d in info["devices"]:
        print(f"  [{d['index']}] {d['name']}, compute capability {d['cc']}, {d['sms']} SMs, "
              f"{d['memory_bytes'] / 2**30:.1f} GiB"
              + ("" if d["code_for_it"] else
                 " (no code for it in this build: see VOXCONV_CUDA_ARCHS)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
