"""MooncakeDistributedStore and ReplicateConfig over libkvtier.so.

Names, arguments and return conventions follow Mooncake Store's Python binding
(mooncake.store): 0 or a count or a size on success, a negative Mooncake
ErrorCode on failure (-200 NO_AVAILABLE_HANDLE: back off and retry; -704
OBJECT_NOT_FOUND; -706 OBJECT_HAS_LEASE; -600 INVALID_PARAMS for a buffer that
is not registered or too small). get() and get_batch() answer b"" for a key
they cannot read, as Mooncake's do.

The library is loaded when the first MooncakeDistributedStore is created,
not at import: it runs Go's runtime, which does not survive fork(), so a
process that forks workers (vLLM, SGLang) should create stores in the workers,
as those engines do. Environment it reads (KVTIER_MASTER for init_all) is
read when it loads.

Every call goes through ctypes.CDLL, which releases the GIL for the whole
call: transfers from several threads run in parallel. The zero-copy calls
(put_from, get_into and their batch forms) move bytes straight between the
caller's registered memory (numpy arrays by .ctypes.data, torch tensors by
.data_ptr()) and the store.
"""

import ctypes
import threading

from . import _lib

_DEFAULT_SEGMENT = 16 * 1024 * 1024


class ReplicateConfig:
    """Placement of a put, as mooncake.store.ReplicateConfig."""

    def __init__(self):
        self.replica_num = 1
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segments = []
        self.preferred_segment = ""
        # Accepted for compatibility; kvtier places by its own rules.
        self.prefer_alloc_in_same_node = False

    def __str__(self):
        return (
            "ReplicateConfig(replica_num=%d, with_soft_pin=%s, with_hard_pin=%s, "
            "preferred_segment=%r, preferred_segments=%r)"
            % (
                self.replica_num,
                self.with_soft_pin,
                self.with_hard_pin,
                self.preferred_segment,
                list(self.preferred_segments),
            )
        )

    __repr__ = __str__

    def _c(self):
        """The C struct (and what keeps its strings alive)."""
        segs = [s for s in self.preferred_segments if s]
        if self.preferred_segment and not segs:
            segs = [self.preferred_segment]
        arr = (ctypes.c_char_p * len(segs))(*[s.encode() for s in segs]) if segs else None
        c = _lib.ReplicateConfigC(
            replica_num=int(self.replica_num),
            with_soft_pin=1 if self.with_soft_pin else 0,
            with_hard_pin=1 if self.with_hard_pin else 0,
            preferred_segments=ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)) if arr else None,
            preferred_segments_count=len(segs),
        )
        return ctypes.byref(c), (c, arr)


def _cfg(config):
    if config is None:
        return None, None
    return config._c()


class BufferHandle:
    """An object read by get_buffer(): memory this package owns, freed when
    the handle and every view of it are gone. As Mooncake's BufferHandle it
    has ptr(), size() and len(), and it exports the buffer protocol, so
    memoryview(handle), numpy.asarray(handle) and torch.frombuffer(handle)
    view it without a copy. (Each handle is an instance of a ctypes byte
    array type of its size, which is what gives it the buffer protocol.)"""

    def ptr(self):
        return self._ptr

    def size(self):
        return self._size

    def tobytes(self):
        return ctypes.string_at(self._ptr, self._size)

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", 0), 0
        if ptr:
            _lib.lib().kvtier_free(ptr)


_handle_types = {}
_handle_types_lock = threading.Lock()


def _buffer_handle(ptr, size):
    """A BufferHandle over size bytes at ptr (memory from kvtier_store_get_alloc)."""
    with _handle_types_lock:
        t = _handle_types.get(size)
        if t is None:
            t = type("BufferHandle", (ctypes.c_ubyte * size, BufferHandle), {})
            if len(_handle_types) < 4096:  # object sizes repeat (chunk sizes)
                _handle_types[size] = t
    h = t.from_address(ptr) if size else t()
    h._ptr, h._size = ptr, size
    return h


def _size(v):
    """A size given as a number or as a string such as "4GB" or "512 MB"."""
    if isinstance(v, (int, float)):
        return int(v)
    t = str(v).strip().lower().replace(" ", "")
    for unit, mult in (("gib", 1 << 30), ("mib", 1 << 20), ("kib", 1 << 10), ("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10), ("b", 1)):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def _flatten(all_ptrs, all_sizes):
    counts = (ctypes.c_size_t * len(all_ptrs))(*[len(p) for p in all_ptrs])
    flat_p = [int(p) for ps in all_ptrs for p in ps]
    flat_s = [int(z) for zs in all_sizes for z in zs]
    return counts, (ctypes.c_void_p * len(flat_p))(*flat_p), (ctypes.c_size_t * len(flat_s))(*flat_s)


def _keys(keys):
    enc = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
    return (ctypes.c_char_p * len(enc))(*enc)


def _source(value):
    """(pointer argument, length, keep-alive) for a bytes-like value."""
    if isinstance(value, bytes):
        return value, len(value), value  # ctypes passes a bytes' own buffer
    mv = memoryview(value)
    if not mv.contiguous:
        b = mv.tobytes()
        return b, len(b), b
    n = mv.nbytes
    if n == 0:
        return None, 0, None
    if mv.readonly:
        b = mv.tobytes()
        return b, n, b
    arr = (ctypes.c_char * n).from_buffer(mv.cast("B"))
    return ctypes.addressof(arr), n, (arr, mv)


class MooncakeDistributedStore:
    """A kvtier client with the interface of mooncake.store.MooncakeDistributedStore."""

    def __init__(self):
        self._lib = _lib.lib()
        self._h = self._lib.mooncake_store_create()
        self._mu = threading.Lock()
        # What this handle registered, base -> size (close() forgets them all).
        self._regs = {}

    # ---- lifecycle -------------------------------------------------------

    def setup(
        self,
        local_hostname,
        metadata_server=None,
        global_segment_size=_DEFAULT_SEGMENT,
        local_buffer_size=_DEFAULT_SEGMENT,
        protocol="tcp",
        rdma_devices="",
        master_server_addr="127.0.0.1:50051",
        engine=None,
        tenant_id=None,
        enable_client_http_server=None,
        client_http_port=None,
        enable_ssd_offload=None,
        ssd_offload_path=None,
    ):
        """Connects to the kvtier master at master_server_addr. As Mooncake's,
        it also takes one dict (what vLLM's MooncakeStoreConnector passes):
        {"local_hostname", "metadata_server", "global_segment_size",
        "local_buffer_size", "protocol", "rdma_devices" (or "device_name"),
        "master_server_addr" (or "master_server_address"), "tenant_id"}; sizes
        may be strings such as "4GB". metadata_server and engine are
        accepted and ignored (kvtier's master is its only metadata service);
        protocol is "tcp" (no RDMA) or "rdma" (rdma_devices' first device,
        where the library was built with RDMA and the host has it; else TCP,
        the reason on stderr). tenant_id selects the kvtier tenant.
        The HTTP-server and SSD-offload arguments of newer Mooncake releases
        are accepted and ignored: the kvtier appliance owns its SSD tier."""
        if isinstance(local_hostname, dict):
            d = local_hostname
            return self.setup(
                d.get("local_hostname", "localhost"),
                d.get("metadata_server", ""),
                _size(d.get("global_segment_size", _DEFAULT_SEGMENT)),
                _size(d.get("local_buffer_size", _DEFAULT_SEGMENT)),
                d.get("protocol", "tcp"),
                d.get("rdma_devices", d.get("device_name", "")),
                d.get("master_server_addr", d.get("master_server_address", "127.0.0.1:50051")),
                tenant_id=d.get("tenant_id"),
            )
        if tenant_id:
            rc = self._lib.kvtier_store_set_tenant(self._h, str(tenant_id).encode())
            if rc != 0:
                return rc
        return self._lib.mooncake_store_setup(
            self._h,
            (local_hostname or "").encode(),
            (metadata_server or "").encode(),
            _size(global_segment_size),
            _size(local_buffer_size),
            (protocol or "tcp").encode(),
            (rdma_devices or "").encode(),
            (master_server_addr or "").encode(),
        )

    def init_all(self, protocol, device_name, mount_segment_size=_DEFAULT_SEGMENT):
        return self._lib.mooncake_store_init_all(
            self._h, (protocol or "tcp").encode(), (device_name or "").encode(), int(mount_segment_size)
        )

    def health_check(self):
        return self._lib.mooncake_store_health_check(self._h)

    def close(self):
        with self._mu:
            h, self._h = self._h, None
            self._regs.clear()
        if h:
            self._lib.mooncake_store_destroy(h)
        return 0

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def get_hostname(self):
        buf = ctypes.create_string_buffer(1024)
        if self._lib.mooncake_store_get_hostname(self._h, buf, len(buf)) != 0:
            return ""
        return buf.value.decode()

    # ---- put -------------------------------------------------------------

    def put(self, key, value, config=None):
        ptr, n, keep = _source(value)
        cfg, cfg_keep = _cfg(config)
        return self._lib.mooncake_store_put(self._h, key.encode(), ptr, n, cfg)

    def put_parts(self, key, *parts, config=None):
        """Stores the concatenation of parts (bytes-like objects) under key;
        LMCache stores its metadata header and the KV bytes this way."""
        if len(parts) == 1:
            return self.put(key, parts[0], config)
        return self.put(key, b"".join(memoryview(p).cast("B") for p in parts), config)

    def put_batch(self, keys, values, config=None):
        """Stores values[i] under keys[i]; 0 when every put succeeded, else the
        first failure's code."""
        if len(keys) != len(values):
            return -600
        if not keys:
            return 0
        res = self._put_many(keys, [_source(v) for v in values], config)
        for r in res:
            if r != 0:
                return r
        return 0

    def _put_many(self, keys, sources, config):
        n = len(keys)
        ptrs = (ctypes.c_void_p * n)()
        sizes = (ctypes.c_size_t * n)()
        for i, (p, size, _) in enumerate(sources):
            if isinstance(p, bytes):
                ptrs[i] = ctypes.cast(ctypes.c_char_p(p), ctypes.c_void_p).value
            else:
                ptrs[i] = p
            sizes[i] = size
        results = (ctypes.c_int * n)()
        cfg, cfg_keep = _cfg(config)
        rc = self._lib.kvtier_store_batch_put(self._h, _keys(keys), ptrs, sizes, n, cfg, results)
        if rc != 0:
            return [rc] * n
        return list(results)

    def put_from(self, key, buffer_ptr, size, config=None):
        cfg, cfg_keep = _cfg(config)
        return self._lib.mooncake_store_put_from(self._h, key.encode(), int(buffer_ptr), int(size), cfg)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [-600] * n
        if n == 0:
            return []
        results = (ctypes.c_int * n)()
        cfg, cfg_keep = _cfg(config)
        rc = self._lib.mooncake_store_batch_put_from(
            self._h,
            _keys(keys),
            (ctypes.c_void_p * n)(*[int(p) for p in buffer_ptrs]),
            (ctypes.c_size_t * n)(*[int(s) for s in sizes]),
            n,
            cfg,
            results,
        )
        if rc != 0:
            return [rc] * n
        return list(results)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Stores, for each key, the concatenation of its registered buffers
        (vLLM's connector passes one buffer per layer). A key with one buffer
        is stored without a copy; the parts of a key with several are
        gathered once, in the library."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n or any(
            len(p) != len(z) for p, z in zip(all_buffer_ptrs, all_sizes)
        ):
            return [-600] * n
        if n == 0:
            return []
        counts, ptrs, sizes = _flatten(all_buffer_ptrs, all_sizes)
        results = (ctypes.c_int * n)()
        cfg, cfg_keep = _cfg(config)
        rc = self._lib.kvtier_store_batch_put_multi(self._h, _keys(keys), n, counts, ptrs, sizes, cfg, results)
        if rc != 0:
            return [rc] * n
        return list(results)

    # ---- get -------------------------------------------------------------

    def get_buffer(self, key):
        """The object as a BufferHandle, or None when it cannot be read."""
        out = ctypes.c_void_p()
        n = self._lib.kvtier_store_get_alloc(self._h, key.encode(), ctypes.byref(out))
        if n < 0:
            return None
        return _buffer_handle(out.value or 0, n)

    def get(self, key):
        h = self.get_buffer(key)
        if h is None:
            return b""
        return h.tobytes()

    def batch_get_buffer(self, keys):
        return [h for h, _ in self._batch_get_alloc(keys)]

    def _batch_get_alloc(self, keys):
        """(BufferHandle or None, size or negative code) per key."""
        n = len(keys)
        if n == 0:
            return []
        outs = (ctypes.c_void_p * n)()
        res = (ctypes.c_int64 * n)()
        rc = self._lib.kvtier_store_batch_get_alloc(self._h, _keys(keys), n, outs, res)
        if rc != 0:
            return [(None, rc)] * n
        return [(_buffer_handle(outs[i] or 0, res[i]) if res[i] >= 0 else None, res[i]) for i in range(n)]

    def get_batch(self, keys):
        return [h.tobytes() if h is not None else b"" for h in self.batch_get_buffer(keys)]

    def get_into(self, key, buffer_ptr, size):
        return self._lib.mooncake_store_get_into(self._h, key.encode(), int(buffer_ptr), int(size))

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [-600] * n
        if n == 0:
            return []
        results = (ctypes.c_int64 * n)()
        rc = self._lib.mooncake_store_batch_get_into(
            self._h,
            _keys(keys),
            (ctypes.c_void_p * n)(*[int(p) for p in buffer_ptrs]),
            (ctypes.c_size_t * n)(*[int(s) for s in sizes]),
            n,
            results,
        )
        if rc != 0:
            return [rc] * n
        return list(results)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=False):
        """Reads each key's object and spreads it over its registered buffers in
        order; the result is the object's size, or a negative code (-600 when
        the buffers are not registered or together smaller than the object)."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n or any(
            len(p) != len(z) for p, z in zip(all_buffer_ptrs, all_sizes)
        ):
            return [-600] * n
        if n == 0:
            return []
        counts, ptrs, sizes = _flatten(all_buffer_ptrs, all_sizes)
        results = (ctypes.c_int64 * n)()
        rc = self._lib.kvtier_store_batch_get_multi(self._h, _keys(keys), n, counts, ptrs, sizes, results)
        if rc != 0:
            return [rc] * n
        return list(results)

    # ---- registration ----------------------------------------------------

    def register_buffer(self, buffer_ptr, size):
        rc = self._lib.mooncake_store_register_buffer(self._h, int(buffer_ptr), int(size))
        if rc == 0:
            with self._mu:
                self._regs[int(buffer_ptr)] = int(size)
        return rc

    def unregister_buffer(self, buffer_ptr):
        rc = self._lib.mooncake_store_unregister_buffer(self._h, int(buffer_ptr))
        if rc == 0:
            with self._mu:
                self._regs.pop(int(buffer_ptr), None)
        return rc

    # ---- existence, size, removal -----------------------------------------

    def is_exist(self, key):
        return self._lib.mooncake_store_is_exist(self._h, key.encode())

    def batch_is_exist(self, keys):
        n = len(keys)
        if n == 0:
            return []
        results = (ctypes.c_int * n)()
        rc = self._lib.mooncake_store_batch_is_exist(self._h, _keys(keys), n, results)
        if rc != 0:
            return [rc] * n
        return list(results)

    def get_size(self, key):
        return self._lib.mooncake_store_get_size(self._h, key.encode())

    def remove(self, key, force=False):
        return self._lib.mooncake_store_remove(self._h, key.encode(), 1 if force else 0)

    def remove_by_regex(self, regex_pattern, force=False):
        return self._lib.mooncake_store_remove_by_regex(self._h, regex_pattern.encode(), 1 if force else 0)

    def remove_all(self, force=False):
        return self._lib.mooncake_store_remove_all(self._h, 1 if force else 0)

    def batch_remove(self, keys, force=False):
        n = len(keys)
        if n == 0:
            return []
        results = (ctypes.c_int * n)()
        rc = self._lib.kvtier_store_batch_remove(self._h, _keys(keys), n, 1 if force else 0, results)
        if rc != 0:
            return [rc] * n
        return list(results)


def error_name(code):
    """The name of a return code, e.g. "OBJECT_NOT_FOUND" for -704."""
    return _lib.lib().kvtier_error_name(int(code)).decode()
