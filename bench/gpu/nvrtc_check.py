"""Compile every fused GPU pass (kernels/cuda/cu/) with NVRTC for sm_90, on any computer: a syntax or
type error shows here, before a GPU session's first kernel call does.

    python bench/gpu/nvrtc_check.py [--lib PATH/libnvrtc.so.13] [--arch compute_90]

NVRTC ships as a wheel (``pip install --target /tmp/nvrtc nvidia-cuda-nvrtc``); without ``--lib``
the script looks for ``libnvrtc.so.*`` under ``nvidia/*/lib`` of ``sys.path`` and ``--site``. Exit 0
when every storage format compiles, 1 otherwise (the compiler's log printed), 2 without NVRTC.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from kernels.cuda.source import DTYPES, kernel_names, source  # noqa: E402


def find_nvrtc(extra: list[str]) -> str | None:
    for root in extra + sys.path:
        for lib in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib", "libnvrtc.so.*"))):
            if "builtins" not in lib and "alt" not in lib:
                return lib
    return None


def compile_one(lib, text: str, arch: str) -> tuple[int, str, int]:
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), b"fused.cu", 0, None, None)
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    ptx = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx))
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace"), ptx.value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="libnvrtc.so path")
    ap.add_argument("--site", action="append", default=[], help="a site-packages folder holding nvidia/*/lib")
    ap.add_argument("--arch", default="compute_90")
    args = ap.parse_args()
    path = args.lib or find_nvrtc(args.site)
    if not path:
        print("no libnvrtc found: pip install --target DIR nvidia-cuda-nvrtc, then --site DIR")
        return 2
    for builtins in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")):
        if ".alt." not in builtins:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)  # NVRTC opens it by name
    lib = ctypes.CDLL(path)
    failed = 0
    for dt in DTYPES:
        rc, log, ptx = compile_one(lib, source(dt), args.arch)
        print(f"{dt}: {'ok' if rc == 0 else f'FAILED (nvrtc {rc})'}, {ptx} bytes of PTX, "
              f"{len(kernel_names())} kernels")
        if rc != 0 or log.strip():
            print(log)
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
