"""Build rules for CUDA code: an nvcc macro and CPU/CUDA selection.

CUDA code is built when the toolkit was found (@local_config_cuda) and the
build is not `--config=nocuda` (--define=pstrain_cuda=off). NCCL code is built
when, in addition, NCCL was found (cuda_configure.bzl says where it looked).
"""

load(
    "@local_config_cuda//:defs.bzl",
    "CUDA_ENABLED",
    "NCCL_ENABLED",
    "NVCC",
    "NVCC_ARCH_FLAGS",
)

# Machine code for A100, L40S and H100/H200 plus compute_90 PTX that newer
# GPUs can JIT-compile (those the local nvcc supports: NVCC_ARCH_FLAGS), and
# line tables for profilers and compute-sanitizer (-lineinfo: no slowdown).
NVCC_FLAGS = [
    "-O2",
    "-std=c++17",
    "-lineinfo",
    "-Xcompiler",
    "-fPIC",
] + NVCC_ARCH_FLAGS

_NOCUDA = "//third_party/cuda:nocuda"
_UNSUPPORTED = ["//third_party/cuda:cuda_unsupported"]

def if_cuda(if_true, if_false = []):
    """`if_true` when CUDA code is built, else `if_false`."""
    if not CUDA_ENABLED:
        return if_false
    return select({_NOCUDA: if_false, "//conditions:default": if_true})

def if_nccl(if_true, if_false = []):
    """`if_true` when CUDA code is built and NCCL was found, else `if_false`."""
    if not NCCL_ENABLED:
        return if_false
    return if_cuda(if_true, if_false)

def cuda_compatible():
    """target_compatible_with for targets that only build with CUDA, so that
    `bazel build //...` skips them in CPU-only builds."""
    if not CUDA_ENABLED:
        return _UNSUPPORTED
    return select({_NOCUDA: _UNSUPPORTED, "//conditions:default": []})

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """Compiles each .cu in `srcs` with nvcc (one genrule each) and wraps the
    objects in a cc_library `name` that links the CUDA runtime.

    The .cu files may include `hdrs` (paths from the workspace root) and the
    toolkit's headers; nvcc does not see `deps`, which only join the link.
    """
    objs = []
    for src in srcs:
        obj = "_%s_%s.pic.o" % (name, src.replace("/", "_").replace(".cu", ""))
        native.genrule(
            name = obj.replace(".", "_"),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([NVCC] + NVCC_FLAGS + [
                "-I.",
                "-c",
                "$(location %s)" % src,
                "-o",
                "$@",
            ]),
            message = "nvcc " + src,
            target_compatible_with = cuda_compatible(),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_config_cuda//:cuda"],
        target_compatible_with = cuda_compatible(),
        **kwargs
    )
