"""kvtier: a Mooncake-compatible Python client for a kvtier cluster.

    from kvtier import MooncakeDistributedStore, ReplicateConfig

    store = MooncakeDistributedStore()
    store.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", "10.0.0.5:50051")
    store.put("key", b"value")

The package is ctypes over libkvtier.so, the C library `make build` builds
(bin/libkvtier.so in a checkout, shipped inside the package by
`pip install ./python`, or named by KVTIER_LIB). Nothing is compiled at
install time.

Code written for Mooncake Store runs unchanged against kvtier in one of two
opt-in ways: kvtier.install_as_mooncake() in this process (before the code
imports mooncake.store), or PYTHONPATH=$(python3 -c 'import kvtier;
print(kvtier.mooncake_path())') for an engine and every process it spawns.
"""

import os
import sys
import types

from ._lib import library_path
from .store import BufferHandle, MooncakeDistributedStore, ReplicateConfig, error_name

__all__ = [
    "BufferHandle",
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "error_name",
    "install_as_mooncake",
    "library_path",
    "mooncake_path",
]


def mooncake_path():
    """A directory that, put on PYTHONPATH (or sys.path), makes `import
    mooncake.store` load kvtier's classes, in this process and in every
    process it starts with that environment (vLLM and SGLang workers)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "mooncake_shim")


def install_as_mooncake(force=False):
    """Registers modules `mooncake` and `mooncake.store` (in sys.modules) so
    that Mooncake client code imports kvtier's classes. An installed Mooncake
    package is left alone unless force=True. Returns the mooncake.store module
    in effect."""
    existing = sys.modules.get("mooncake.store")
    if existing is not None and not getattr(existing, "__kvtier__", False) and not force:
        return existing
    if not force:
        try:
            import importlib.util

            if importlib.util.find_spec("mooncake") is not None:
                import mooncake.store as real  # a real Mooncake is installed

                return real
        except ImportError:
            pass
    pkg = types.ModuleType("mooncake")
    pkg.__path__ = []
    pkg.__kvtier__ = True
    store = types.ModuleType("mooncake.store")
    store.__kvtier__ = True
    store.MooncakeDistributedStore = MooncakeDistributedStore
    store.ReplicateConfig = ReplicateConfig
    store.BufferHandle = BufferHandle
    pkg.store = store
    sys.modules["mooncake"] = pkg
    sys.modules["mooncake.store"] = store
    return store
