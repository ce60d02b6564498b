"""Loading libkvtier.so and declaring its C functions (kvtier_store.h)."""

import ctypes
import ctypes.util
import os
import threading

_LIB_NAME = "libkvtier.so"
_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("KVTIER_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # Shipped inside the installed package (pip install ./python copies it).
    yield os.path.join(here, _LIB_NAME)
    # A checkout where `make build` ran: python/kvtier -> bin/.
    yield os.path.join(here, os.pardir, os.pardir, "bin", _LIB_NAME)
    found = ctypes.util.find_library("kvtier")
    if found:
        yield found


def library_path():
    """The path of the libkvtier.so this package loads (KVTIER_LIB overrides)."""
    tried = []
    for path in _candidates():
        if os.sep not in path:
            return path  # a name the dynamic loader resolves (find_library)
        if os.path.isfile(path):
            return os.path.abspath(path)
        tried.append(path)
    raise OSError(
        "kvtier: cannot find %s (tried %s); run `make build` in the kvtier "
        "checkout or set KVTIER_LIB" % (_LIB_NAME, ", ".join(tried) or "nothing")
    )


class ReplicateConfigC(ctypes.Structure):
    """struct mooncake_replicate_config."""

    _fields_ = [
        ("replica_num", ctypes.c_size_t),
        ("with_soft_pin", ctypes.c_int),
        ("with_hard_pin", ctypes.c_int),
        ("preferred_segments", ctypes.POINTER(ctypes.c_char_p)),
        ("preferred_segments_count", ctypes.c_size_t),
    ]


_vp, _cp, _sz, _i, _i64, _u64, _h = (
    ctypes.c_void_p,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int64,
    ctypes.c_uint64,
    ctypes.c_void_p,
)
_cfgp = ctypes.POINTER(ReplicateConfigC)
_pp = ctypes.POINTER(ctypes.c_char_p)
_vpp = ctypes.POINTER(ctypes.c_void_p)

_SIGNATURES = {
    "mooncake_store_create": (_h, []),
    "mooncake_store_destroy": (None, [_h]),
    "mooncake_store_setup": (_i, [_h, _cp, _cp, _u64, _u64, _cp, _cp, _cp]),
    "mooncake_store_init_all": (_i, [_h, _cp, _cp, _u64]),
    "mooncake_store_health_check": (_i, [_h]),
    "mooncake_store_put": (_i, [_h, _cp, _vp, _sz, _cfgp]),
    "mooncake_store_put_from": (_i, [_h, _cp, _vp, _sz, _cfgp]),
    "mooncake_store_batch_put_from": (_i, [_h, _pp, _vpp, ctypes.POINTER(_sz), _sz, _cfgp, ctypes.POINTER(_i)]),
    "mooncake_store_get_into": (_i64, [_h, _cp, _vp, _sz]),
    "mooncake_store_batch_get_into": (_i, [_h, _pp, _vpp, ctypes.POINTER(_sz), _sz, ctypes.POINTER(_i64)]),
    "mooncake_store_is_exist": (_i, [_h, _cp]),
    "mooncake_store_batch_is_exist": (_i, [_h, _pp, _sz, ctypes.POINTER(_i)]),
    "mooncake_store_get_size": (_i64, [_h, _cp]),
    "mooncake_store_get_hostname": (_i, [_h, ctypes.c_char_p, _sz]),
    "mooncake_store_remove": (_i, [_h, _cp, _i]),
    "mooncake_store_remove_by_regex": (_i64, [_h, _cp, _i]),
    "mooncake_store_remove_all": (_i64, [_h, _i]),
    "mooncake_store_register_buffer": (_i, [_h, _vp, _sz]),
    "mooncake_store_unregister_buffer": (_i, [_h, _vp]),
    "kvtier_store_batch_put": (_i, [_h, _pp, _vpp, ctypes.POINTER(_sz), _sz, _cfgp, ctypes.POINTER(_i)]),
    "kvtier_store_get_alloc": (_i64, [_h, _cp, _vpp]),
    "kvtier_store_batch_get_alloc": (_i, [_h, _pp, _sz, _vpp, ctypes.POINTER(_i64)]),
    "kvtier_store_batch_remove": (_i, [_h, _pp, _sz, _i, ctypes.POINTER(_i)]),
    "kvtier_store_set_tenant": (_i, [_h, _cp]),
    "kvtier_store_batch_put_multi": (_i, [_h, _pp, _sz, ctypes.POINTER(_sz), _vpp, ctypes.POINTER(_sz), _cfgp, ctypes.POINTER(_i)]),
    "kvtier_store_batch_get_multi": (_i, [_h, _pp, _sz, ctypes.POINTER(_sz), _vpp, ctypes.POINTER(_sz), ctypes.POINTER(_i64)]),
    "kvtier_free": (None, [_vp]),
    "kvtier_error_name": (ctypes.c_char_p, [_i]),
}


def lib():
    """The loaded library (loaded once, on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            # ctypes.CDLL (not PyDLL) releases the GIL for every call, so
            # transfers in several Python threads run in parallel.
            handle = ctypes.CDLL(library_path())
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = handle
        return _lib
