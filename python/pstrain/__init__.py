"""pstrain's Python worker: PyTorch models trained on pstrain's servers.

The framework-neutral pieces live here (the generated stubs, the worker's
session with the coordinator, the shard client, the data sampler); the
PyTorch API is `pstrain.torch` (docs/python.md).
"""

from pstrain.errors import PstrainError  # noqa: F401
