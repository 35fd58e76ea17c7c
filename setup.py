"""Builds the voxconv wheel with libvoxconv inside (metadata: pyproject.toml).

build_py configures and builds the shared library with CMake (Release, no
tests, CUDA when nvcc is found) in the setuptools build folder
(build-wheel/temp.*/cmake: a second `pip install .` rebuilds only what
changed) and copies it into the package as voxconv/lib/libvoxconv.so, the
first place voxconv/_lib.py looks after $VOXCONV_LIBRARY. The wheel is
tagged py3-none-<platform>: it holds machine code but no Python extension,
so one wheel serves every Python 3.

Environment:
  VOXCONV_CUDA                unset: CUDA backend when nvcc is found;
                              0/off: CPU-only; 1/on: fail without CUDA
  VOXCONV_CUDA_ARCHS          CUDA targets, ;- or ,-separated (CMake's
                              VOXCONV_CUDA_ARCHS: NN = machine code for
                              sm_NN, NN-virtual = PTX); default below
  VOXCONV_CUDA_COMPRESS       nvcc --compress-mode of the device code
                              (default size: 7.6 MB for the default targets,
                              50 MB with none)
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: every core)
  VOXCONV_CMAKE_ARGS          more arguments for the CMake configure step
  VOXCONV_BUILD_DIR           the CMake build folder (default above)
"""

import os
import shlex
import shutil
import subprocess
import time

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # building without the wheel package: no wheel to tag
    bdist_wheel = None

ROOT = os.path.dirname(os.path.abspath(__file__))

# The GPUs users have: A100/A30 (8.0), RTX 30xx/A10/A40 (8.6), RTX 40xx/L4/
# L40 (8.9), H100/H200 (9.0a: the wgmma kernels), and PTX of 8.9 that the
# driver compiles for later GPUs (Blackwell) when the library loads.
DEFAULT_CUDA_ARCHS = "80;86;89;90a;89-virtual"


def _flag(name):
    """True / False for a boolean environment variable, None when unset."""
    v = os.environ.get(name, "").strip().lower()
    if not v:
        return None
    if v in ("1", "on", "true", "yes"):
        return True
    if v in ("0", "off", "false", "no"):
        return False
    raise SystemExit(f"{name}={os.environ[name]!r}: expected 0/1, on/off, true/false")


def _arch_list(value):
    return ";".join(a for a in value.replace(",", ";").replace(" ", ";").split(";") if a)


def _cache_value(cache, key):
    try:
        with open(cache) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


def build_libvoxconv(build_dir):
    """Configures and builds libvoxconv in build_dir; returns the library file."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise SystemExit("voxconv: building libvoxconv needs CMake >= 3.22 "
                         "(Debian: apt-get install cmake build-essential)")
    cuda = _flag("VOXCONV_CUDA")
    archs = _arch_list(os.environ.get("VOXCONV_CUDA_ARCHS", "") or DEFAULT_CUDA_ARCHS)
    args = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            "-DVOXCONV_TESTS=OFF", "-DVOXCONV_SANITIZE=OFF",
            f"-DVOXCONV_CUDA={'OFF' if cuda is False else 'ON'}",
            f"-DVOXCONV_CUDA_ARCHS={archs}",
            f"-DVOXCONV_CUDA_COMPRESS={os.environ.get('VOXCONV_CUDA_COMPRESS', 'size')}"]
    args += shlex.split(os.environ.get("VOXCONV_CMAKE_ARGS", ""))
    print("voxconv: " + " ".join(shlex.quote(a) for a in args), flush=True)
    subprocess.check_call(args)

    targets = _cache_value(os.path.join(build_dir, "CMakeCache.txt"),
                           "VOXCONV_BUILT_CUDA_TARGETS")
    if cuda and not targets:
        raise SystemExit("voxconv: VOXCONV_CUDA=1 but CMake configured no CUDA "
                         "backend (no nvcc found? put it on PATH or set CUDACXX)")
    build = [cmake, "--build", build_dir, "--target", "voxconv"]
    if not os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"):
        build += ["--parallel", str(os.cpu_count() or 1)]
    t = time.monotonic()
    subprocess.check_call(build)
    print(f"voxconv: libvoxconv built in {time.monotonic() - t:.0f} s "
          f"({'CUDA ' + targets if targets else 'CPU only'})", flush=True)
    lib = os.path.realpath(os.path.join(build_dir, "libvoxconv.so"))
    if not os.path.isfile(lib):
        raise SystemExit(f"voxconv: the build made no {lib}")
    return lib


class BuildPyWithLibrary(build_py):
    """build_py, then libvoxconv into voxconv/lib/ of the build (in the
    source tree's python/voxconv/lib/ for an editable install)."""

    def run(self):
        super().run()
        build_dir = os.environ.get("VOXCONV_BUILD_DIR") or os.path.join(
            self.get_finalized_command("build").build_temp, "cmake")
        lib = build_libvoxconv(os.path.abspath(build_dir))
        if getattr(self, "editable_mode", False):
            dest = os.path.join(ROOT, "python", "voxconv", "lib")
        else:
            dest = os.path.join(self.build_lib, "voxconv", "lib")
        os.makedirs(dest, exist_ok=True)
        # One regular file under the name _lib.py loads (a wheel cannot hold
        # the soname symlinks; ctypes opens it by path).
        target = os.path.join(dest, "libvoxconv.so")
        shutil.copyfile(lib, target)
        os.chmod(target, 0o755)
        self._voxconv_lib = target
        print(f"voxconv: {target} ({os.path.getsize(target) / 1e6:.1f} MB)", flush=True)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        lib = getattr(self, "_voxconv_lib", None)
        return outputs + [lib] if lib else outputs


class BinaryDistribution(Distribution):
    """Holds a compiled library: platform-specific build and install paths."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithLibrary}

if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """py3-none-<platform>: the library is loaded through ctypes, so the
        wheel is bound to the platform but to no Python version or ABI."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none") + tuple(super().get_tag()[2:])

    cmdclass["bdist_wheel"] = PlatformWheel

# build-wheel/, not setuptools' build/: that is the CMake build folder of the
# README's commands.
setup(cmdclass=cmdclass, distclass=BinaryDistribution,
      options={"build": {"build_base": "build-wheel"}})
