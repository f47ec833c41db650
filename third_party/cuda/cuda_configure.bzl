"""Detects a local CUDA toolkit and NCCL; generates the repository @local_config_cuda.

Nothing is downloaded. The toolkit is looked for at the `path` attribute
(/usr/local/cuda), or at $PSTRAIN_CUDA_PATH when set (e.g.
`--repo_env=PSTRAIN_CUDA_PATH=/nonexistent` tries the CPU-only build). When
`<path>/bin/nvcc` and the runtime and cuBLAS headers exist, the repository holds:
  defs.bzl: CUDA_ENABLED = True, CUDA_PATH, NVCC, NVCC_ARCH_FLAGS (the
            -gencode flags for sm_80, sm_89, sm_90 and compute_90 PTX, those
            this nvcc knows), NCCL_ENABLED, NCCL_NOTE
  //:cuda   the toolkit's headers (a symlink to <path>/include) plus the link
            flags for the CUDA runtime and cuBLAS (rpath to <path>/lib64).
  //:nccl   nccl.h and the link flags for libnccl, when NCCL was found.
Otherwise CUDA_ENABLED = False and //:cuda is empty, so a machine without the
toolkit builds CPU-only with no flag.

NCCL is not part of the CUDA toolkit: it is looked for, in order, at
$PSTRAIN_NCCL_PATH (a directory with include/nccl.h and lib/ or lib64/ holding
libnccl.so), in the toolkit (<path>/include, <path>/lib64), and where the
Debian/Ubuntu and NVIDIA packages (libnccl-dev) put it (/usr/include,
/usr/lib/<multiarch>). PSTRAIN_NCCL_PATH=off builds without NCCL. Without
NCCL the build goes on (allreduce.backend nccl then answers
FAILED_PRECONDITION naming the reason) and the rule prints why.

The rule is `local`: it is re-evaluated when Bazel restarts, so installing or
removing the toolkit or NCCL is picked up.
"""

_REQUIRED = ["bin/nvcc", "include/cuda_runtime.h", "include/cublas_v2.h"]

# Machine code for A100 (sm_80), L40S/L4 (sm_89) and H100/H200 (sm_90), plus
# compute_90 PTX that newer GPUs JIT-compile; each only if nvcc knows it.
_WANTED_SM = ["sm_80", "sm_89", "sm_90"]
_PTX = "compute_90"

# When nvcc cannot list its targets (--list-gpu-code is missing or fails):
# the Hopper-only set that earlier builds used.
_FALLBACK_ARCH = ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]

def _arch_flags(ctx, nvcc):
    """-gencode flags for the wanted targets this nvcc supports, and a note."""
    res = ctx.execute([nvcc, "--list-gpu-code"], timeout = 60)
    if res.return_code != 0:
        return _FALLBACK_ARCH, "nvcc --list-gpu-code failed; sm_90 + compute_90 only"
    known = [line.strip() for line in res.stdout.splitlines()]
    flags = []
    built = []
    for sm in _WANTED_SM:
        if sm in known:
            flags += ["-gencode", "arch=compute_%s,code=%s" % (sm[3:], sm)]
            built.append(sm)
    if _PTX in known or "sm_90" in known:
        flags += ["-gencode", "arch=%s,code=%s" % (_PTX, _PTX)]
        built.append(_PTX + " (PTX)")
    if not flags:
        return _FALLBACK_ARCH, "nvcc lists none of %s; trying sm_90" % _WANTED_SM
    return flags, "building for " + ", ".join(built)

def _find_nccl(ctx, cuda_path):
    """(include_dir, lib_dir, lib_flag, note); include_dir is None if absent."""
    override = ctx.os.environ.get("PSTRAIN_NCCL_PATH", "")
    if override == "off":
        return None, None, None, "NCCL disabled (PSTRAIN_NCCL_PATH=off)"
    candidates = []
    if override:
        candidates += [
            (override + "/include", override + "/lib"),
            (override + "/include", override + "/lib64"),
        ]
    else:
        candidates += [
            (cuda_path + "/include", cuda_path + "/lib64"),
            ("/usr/include", "/usr/lib/x86_64-linux-gnu"),
            ("/usr/include", "/usr/lib/aarch64-linux-gnu"),
            ("/usr/include", "/usr/lib64"),
            ("/usr/local/include", "/usr/local/lib"),
        ]
    for inc, lib in candidates:
        if not ctx.path(inc + "/nccl.h").exists:
            continue
        if ctx.path(lib + "/libnccl.so").exists:
            return inc, lib, "-lnccl", "NCCL from %s/nccl.h and %s/libnccl.so" % (inc, lib)
        if ctx.path(lib + "/libnccl.so.2").exists:
            return inc, lib, "-l:libnccl.so.2", "NCCL from %s/nccl.h and %s/libnccl.so.2" % (inc, lib)
    looked = ", ".join([inc + "/nccl.h + " + lib + "/libnccl.so" for inc, lib in candidates])
    return None, None, None, "no NCCL found (looked for %s; set PSTRAIN_NCCL_PATH)" % looked

def _c_string(text):
    """`text` as a C string literal."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("PSTRAIN_CUDA_PATH", ctx.attr.path)
    missing = [f for f in _REQUIRED if not ctx.path(path + "/" + f).exists]
    enabled = not missing
    arch = _FALLBACK_ARCH
    arch_note = "no CUDA"
    nccl_inc = None
    nccl_note = "no CUDA toolkit at %s" % path
    if enabled:
        arch, arch_note = _arch_flags(ctx, path + "/bin/nvcc")
        nccl_inc, nccl_lib, nccl_flag, nccl_note = _find_nccl(ctx, path)
        if nccl_inc == None:
            # buildifier: disable=print
            print("pstrain: CUDA at %s, but building WITHOUT NCCL: %s" % (path, nccl_note))
    nccl_enabled = nccl_inc != None
    ctx.file("defs.bzl", "\n".join([
        "# Generated by //third_party/cuda:cuda_configure.bzl.",
        "CUDA_ENABLED = %s" % enabled,
        "CUDA_PATH = %r" % path,
        "NVCC = %r" % (path + "/bin/nvcc"),
        "# %s" % arch_note,
        "NVCC_ARCH_FLAGS = %r" % arch,
        "NCCL_ENABLED = %s" % nccl_enabled,
        "NCCL_NOTE = %r" % nccl_note,
        "# Missing toolkit files (empty when enabled): %s" % ", ".join(missing),
        "",
    ]))
    # What the NCCL stub tells users (worker/allreduce/nccl_allreducer_stub.cc).
    ctx.file("pstrain_nccl_note.h", "\n".join([
        "// Generated by //third_party/cuda:cuda_configure.bzl.",
        "#define PSTRAIN_NCCL_NOTE %s" % _c_string(nccl_note),
        "",
    ]))
    build = 'package(default_visibility = ["//visibility:public"])\n'
    build += """
# Why NCCL is or is not in this build (PSTRAIN_NCCL_NOTE).
cc_library(
    name = "nccl_note",
    hdrs = ["pstrain_nccl_note.h"],
    includes = ["."],
)
"""
    if enabled:
        ctx.symlink(path + "/include", "include")
        lib = path + "/lib64"
        build += """
cc_library(
    name = "cuda",
    hdrs = glob([
        "include/*.h",
        "include/*.hpp",
        "include/crt/**",
        "include/nv/**",
    ]),
    includes = ["include"],
    linkopts = [
        "-L{lib}",
        "-lcublas",
        "-lcudart",
        "-Wl,-rpath,{lib}",
    ],
)
""".format(lib = lib)
    else:
        build += """
# No CUDA toolkit at {path} (missing: {missing}): CPU-only build.
cc_library(name = "cuda")
""".format(path = path, missing = ", ".join(missing))
    if nccl_enabled:
        # Only nccl.h, in a directory of its own, so that no other header of
        # /usr/include joins the sandbox under a second path.
        ctx.symlink(nccl_inc + "/nccl.h", "nccl/include/nccl.h")
        build += """
# {note}
cc_library(
    name = "nccl",
    hdrs = ["nccl/include/nccl.h"],
    includes = ["nccl/include"],
    linkopts = [
        "-L{lib}",
        "{flag}",
        "-Wl,-rpath,{lib}",
    ],
    deps = [":cuda"],
)
""".format(note = nccl_note, lib = nccl_lib, flag = nccl_flag)
    else:
        build += """
# Without NCCL: {note}
cc_library(name = "nccl")
""".format(note = nccl_note)
    ctx.file("BUILD", build)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    attrs = {"path": attr.string(default = "/usr/local/cuda")},
    environ = ["PSTRAIN_CUDA_PATH", "PSTRAIN_NCCL_PATH"],
    local = True,
)
