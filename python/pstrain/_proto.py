"""The gRPC stubs generated from proto/pstrain.proto by the build
(python/BUILD, `pstrain_py_proto`): never edited, never checked in.

They are found, in order, beside this file (`_gen/`, as in Bazel's runfiles
and in `psctl build`'s output), in $PSTRAIN_PY_STUBS, or in the source
tree's build output (.bazel/bin/python/pstrain/_gen).
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_CANDIDATES = [
    os.path.join(_HERE, "_gen"),
    os.environ.get("PSTRAIN_PY_STUBS", ""),
    os.path.join(_HERE, "..", "..", ".bazel", "bin", "python", "pstrain", "_gen"),
]


def _find():
    for d in _CANDIDATES:
        if d and os.path.isfile(os.path.join(d, "pstrain_pb2.py")):
            return os.path.abspath(d)
    raise ImportError(
        "pstrain's gRPC stubs (pstrain_pb2.py) are not built: run "
        "`./psctl build` (or `bazel build //python:pstrain_py_proto`), or "
        "point $PSTRAIN_PY_STUBS at the folder holding them; looked in "
        + ", ".join(d for d in _CANDIDATES if d))


_DIR = _find()
if _DIR not in sys.path:
    # The generated grpc module imports `pstrain_pb2` as a top-level module.
    sys.path.insert(0, _DIR)

import pstrain_pb2 as pb  # noqa: E402
import pstrain_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["pb", "pb_grpc"]
