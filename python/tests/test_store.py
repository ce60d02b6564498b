"""kvtier's MooncakeDistributedStore driven the way inference-engine
connectors drive Mooncake's (vLLM's MooncakeStoreConnector, SGLang HiCache,
LMCache): against a real kvtier store whose master address is in
KVTIER_MASTER. capi/capi_test.go starts a `kvtier standalone` and runs this
file with `python3 -m unittest`.

Needs numpy and torch (Debian's python3-numpy, python3-torch).
"""

import ctypes
import hashlib
import os
import sys
import threading
import time
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import kvtier  # noqa: E402
from kvtier import MooncakeDistributedStore, ReplicateConfig  # noqa: E402

MASTER = os.environ.get("KVTIER_MASTER", "")

NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706
INVALID_KEY = -400


def vllm_key(model, rank, block_hash):
    # The shape of vLLM's Mooncake store keys: model, parallel ranks, then
    # the content hash of the block's tokens.
    return "%s@tp_rank:%d@pcp0@dcp0@pp_rank:0@%s" % (model, rank, block_hash)


# Block hashes derive from token ids; a nonce per run stands for fresh prompts
# (a key stored by an earlier run would be "already stored").
RUN = os.urandom(8).hex()


def block_hashes(prefix, n):
    return [hashlib.sha256(("%s/%s/%d" % (RUN, prefix, i)).encode()).hexdigest() for i in range(n)]


def connect():
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", MASTER)
    if rc != 0:
        raise RuntimeError("setup returned %d" % rc)
    return s


def tensor_bytes(t):
    return t.numel() * t.element_size()


@unittest.skipUnless(MASTER, "KVTIER_MASTER is not set: start `kvtier standalone` and export its gRPC address")
class StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = connect()
        # Keys of an earlier run would make puts "already stored".
        cls.store.remove_by_regex("^py/", True)

    def tearDown(self):
        # A failed test must not leave buffers registered whose memory Python
        # then reuses.
        for base in list(self.store._regs):
            self.store.unregister_buffer(base)

    @classmethod
    def tearDownClass(cls):
        cls.store.close()

    def test_put_get_bytes(self):
        s = self.store
        self.assertEqual(s.put("py/hello", b"hello, kvtier"), 0)
        self.assertEqual(s.put("py/hello", b"hello, kvtier"), 0)  # first writer wins
        self.assertEqual(s.get("py/hello"), b"hello, kvtier")
        self.assertEqual(s.get("py/never"), b"")
        self.assertEqual(s.get_size("py/hello"), 13)
        self.assertEqual(s.get_size("py/never"), OBJECT_NOT_FOUND)
        self.assertEqual(s.is_exist("py/hello"), 1)
        self.assertEqual(s.is_exist("py/never"), 0)
        self.assertEqual(s.health_check(), 0)
        self.assertEqual(s.get_hostname(), "localhost")

    def test_put_batch_get_batch_get_buffer(self):
        s = self.store
        vals = [os.urandom(1000 + i) for i in range(5)]
        keys = ["py/batch/%d" % i for i in range(5)]
        self.assertEqual(s.put_batch(keys, vals), 0)
        self.assertEqual(s.get_batch(keys + ["py/batch/none"]), vals + [b""])
        h = s.get_buffer(keys[2])
        self.assertEqual((len(h), h.size()), (len(vals[2]), len(vals[2])))
        self.assertIsInstance(h, kvtier.BufferHandle)
        self.assertEqual(np.asarray(h).tobytes(), vals[2])  # views, no copy
        self.assertEqual(bytes(memoryview(h)), vals[2])
        self.assertEqual(memoryview(h).nbytes, len(vals[2]))
        self.assertTrue(torch.equal(torch.frombuffer(h, dtype=torch.uint8), torch.tensor(list(vals[2]), dtype=torch.uint8)))
        self.assertEqual(ctypes.string_at(h.ptr(), 4), vals[2][:4])
        self.assertIsNone(s.get_buffer("py/batch/none"))
        # LMCache's connector: a header and the KV bytes with put_parts, read
        # back through memoryview(get_buffer(...)).
        header, kv = b"H" * 28, torch.randn(64, 32).numpy()
        self.assertEqual(s.put_parts("py/parts", header, kv), 0)
        view = memoryview(s.get_buffer("py/parts"))
        self.assertEqual(bytes(view[:28]), header)
        self.assertTrue(np.array_equal(np.frombuffer(view[28:], dtype=np.float32).reshape(64, 32), kv))
        arr = np.arange(4096, dtype=np.int16)
        self.assertEqual(s.put("py/numpy", arr), 0)
        self.assertTrue(np.array_equal(np.frombuffer(s.get("py/numpy"), dtype=np.int16), arr))

    def test_bad_item_fails_alone(self):
        """An empty key or value in a batch fails that item; the others
        are stored and answered."""
        s = self.store
        keys = ["py/bad/a", "py/bad/empty", "py/bad/c"]
        self.assertEqual(s.put_batch(keys, [b"a" * 10, b"", b"c" * 10]), INVALID_PARAMS)
        self.assertEqual(s.batch_is_exist(["py/bad/a", "", "py/bad/empty", "py/bad/c"]),
                         [1, INVALID_KEY, 0, 1])
        self.assertEqual(s.get_batch(["py/bad/a", "py/bad/c"]), [b"a" * 10, b"c" * 10])

    def test_vllm_style_flow_bit_exact(self):
        """batch_is_exist before batch_put_from, a registered host buffer
        filled from tensors, then batch_get_into another registered buffer."""
        s = self.store
        nblocks, shape = 8, (2, 16, 8, 64)  # (k/v, block tokens, heads, head dim)
        for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.int8):
            with self.subTest(dtype=str(dtype)):
                if dtype.is_floating_point:
                    kv = torch.randn((nblocks,) + shape).to(dtype)
                else:
                    kv = torch.randint(-128, 127, (nblocks,) + shape, dtype=dtype)
                host = torch.empty_like(kv)  # the connector's staging buffer
                dst = torch.zeros_like(kv)
                blk = tensor_bytes(kv[0])
                self.assertEqual(s.register_buffer(host.data_ptr(), tensor_bytes(host)), 0)
                self.assertEqual(s.register_buffer(dst.data_ptr(), tensor_bytes(dst)), 0)
                keys = [vllm_key("Qwen/Qwen3-8B", 0, h) for h in block_hashes(str(dtype), nblocks)]
                # Half of the blocks are already stored by "another node".
                host.copy_(kv)
                first = s.batch_put_from(keys[::2], [host[i].data_ptr() for i in range(0, nblocks, 2)], [blk] * (nblocks // 2))
                self.assertEqual(first, [0] * (nblocks // 2))
                exists = s.batch_is_exist(keys)
                self.assertEqual(exists, [1 if i % 2 == 0 else 0 for i in range(nblocks)])
                missing = [i for i, e in enumerate(exists) if e != 1]
                res = s.batch_put_from([keys[i] for i in missing], [host[i].data_ptr() for i in missing], [blk] * len(missing))
                self.assertEqual(res, [0] * len(missing))
                got = s.batch_get_into(keys, [dst[i].data_ptr() for i in range(nblocks)], [blk] * nblocks)
                self.assertEqual(got, [blk] * nblocks)
                self.assertTrue(torch.equal(dst.view(torch.uint8), kv.view(torch.uint8)), "bytes differ")
                self.assertEqual(s.unregister_buffer(host.data_ptr()), 0)
                self.assertEqual(s.unregister_buffer(dst.data_ptr()), 0)

    def test_vllm_store_connector_flow(self):
        """What vLLM's MooncakeStoreConnector does: setup(dict) with string
        sizes, one registered buffer per layer's K and V cache, keys probed
        with batch_is_exist, the missing ones stored with
        batch_put_from_multi_buffers (one address per layer and K/V), then
        loaded with batch_get_into_multi_buffers into other caches."""
        s = MooncakeDistributedStore()
        rc = s.setup({
            "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": "0", "local_buffer_size": "16MB", "protocol": "tcp",
            "rdma_devices": "", "master_server_addr": MASTER,
        })
        self.assertEqual(rc, 0)
        try:
            layers, nblocks, block_tokens, heads, dim = 6, 10, 16, 4, 64
            src = [torch.randn(2, nblocks, block_tokens, heads, dim, dtype=torch.bfloat16) for _ in range(layers)]
            dst = [torch.zeros_like(t) for t in src]
            for t in src + dst:
                self.assertEqual(s.register_buffer(t.data_ptr(), tensor_bytes(t)), 0)
            seg = tensor_bytes(src[0][0, 0])  # one block of K (or V) of one layer

            def addrs(caches, b):
                return [c.data_ptr() + kv * tensor_bytes(c[0]) + b * seg for c in caches for kv in (0, 1)]

            keys = [vllm_key("Llama-3.1-8B", 0, h) for h in block_hashes("multi", nblocks)]
            self.assertEqual(s.batch_is_exist(keys), [0] * nblocks)
            res = s.batch_put_from_multi_buffers(keys, [addrs(src, b) for b in range(nblocks)], [[seg] * 2 * layers] * nblocks)
            self.assertEqual(res, [0] * nblocks)
            self.assertEqual(s.batch_is_exist(keys), [1] * nblocks)
            got = s.batch_get_into_multi_buffers(keys, [addrs(dst, b) for b in range(nblocks)], [[seg] * 2 * layers] * nblocks)
            self.assertEqual(got, [seg * 2 * layers] * nblocks)
            for a, b in zip(src, dst):
                self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)))
            # Buffers too small for the object: refused, nothing written.
            scratch = torch.zeros(4096, dtype=torch.uint8)
            s.register_buffer(scratch.data_ptr(), 4096)
            self.assertEqual(s.batch_get_into_multi_buffers(keys[:1], [[scratch.data_ptr()] * 2], [[2048, 2048]]), [INVALID_PARAMS])
            self.assertFalse(scratch.any())
        finally:
            s.close()

    def test_tenants_are_separate(self):
        a, b = MooncakeDistributedStore(), MooncakeDistributedStore()
        self.assertEqual(a.setup("localhost", "", 0, 0, "tcp", "", MASTER, tenant_id="team-a"), 0)
        self.assertEqual(b.setup({"master_server_address": MASTER, "tenant_id": "team-b"}), 0)
        try:
            self.assertEqual(a.put("py/tenant/k", b"for team a"), 0)
            self.assertEqual(a.get("py/tenant/k"), b"for team a")
            self.assertEqual(b.is_exist("py/tenant/k"), 0)
            self.assertEqual(self.store.is_exist("py/tenant/k"), 0)  # default tenant
            self.assertEqual(a.remove("py/tenant/k", True), 0)
        finally:
            a.close()
            b.close()

    def test_gpu_like_memory_is_refused(self):
        """The CUDA driver reserves device memory as PROT_NONE mappings in the
        CPU's view; kvtier moves host memory only, so registering such a range
        (or an unmapped one) is a clean -600, not a crash on first copy."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        size = 1 << 20
        p = libc.mmap(None, size, 0, 0x22, -1, 0)  # PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS
        self.assertNotIn(p, (None, ctypes.c_void_p(-1).value))
        try:
            self.assertEqual(self.store.register_buffer(p, size), INVALID_PARAMS)
            self.assertEqual(self.store.put_from("py/gpu", p, size), INVALID_PARAMS)
            self.assertEqual(self.store.register_buffer(4096, 4096), INVALID_PARAMS)  # unmapped
        finally:
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.munmap(p, size)

    def test_bad_buffers_are_clean_errors(self):
        s = self.store
        src = np.random.randint(0, 255, 1 << 16, dtype=np.uint8)
        dst = np.zeros(1 << 16, dtype=np.uint8)
        loose = np.zeros(1 << 16, dtype=np.uint8)
        p, q = src.ctypes.data, dst.ctypes.data
        self.assertEqual(s.put_from("py/bad/0", p, src.nbytes), INVALID_PARAMS)  # not registered yet
        self.assertEqual(s.register_buffer(p, src.nbytes), 0)
        self.assertEqual(s.register_buffer(q, dst.nbytes), 0)
        self.assertEqual(s.put_from("py/bad/0", p, src.nbytes), 0)
        self.assertEqual(s.put_from("py/bad/1", p + 1024, src.nbytes), INVALID_PARAMS)  # past the end
        self.assertEqual(s.get_into("py/bad/0", loose.ctypes.data, loose.nbytes), INVALID_PARAMS)
        self.assertEqual(s.get_into("py/bad/0", q, dst.nbytes - 1), INVALID_PARAMS)  # too small
        self.assertEqual(s.get_into("py/bad/0", 0, 16), -1)  # NULL
        self.assertFalse(dst.any(), "a refused get_into wrote into the buffer")
        self.assertEqual(s.get_into("py/bad/0", q, dst.nbytes), dst.nbytes)
        self.assertTrue(np.array_equal(src, dst))
        res = s.batch_get_into(["py/bad/0", "py/bad/0", "py/bad/none"], [q, loose.ctypes.data, q], [dst.nbytes] * 3)
        self.assertEqual(res, [dst.nbytes, INVALID_PARAMS, OBJECT_NOT_FOUND])
        self.assertEqual(s.batch_get_into(["a"], [q, q], [1]), [INVALID_PARAMS])  # length mismatch
        self.assertEqual(s.register_buffer(0, 100), INVALID_PARAMS)
        self.assertEqual(s.unregister_buffer(loose.ctypes.data), INVALID_PARAMS)
        self.assertEqual(s.unregister_buffer(p), 0)
        self.assertEqual(s.put_from("py/bad/2", p, 100), INVALID_PARAMS)  # unregistered again
        s.unregister_buffer(q)

    def test_multi_buffers(self):
        s = self.store
        layers = [torch.randn(64, 128) for _ in range(4)]  # one block over 4 layer tensors
        outs = [torch.zeros(64, 128) for _ in range(4)]
        for t in layers + outs:
            self.assertEqual(s.register_buffer(t.data_ptr(), tensor_bytes(t)), 0)
        sizes = [tensor_bytes(t) for t in layers]
        res = s.batch_put_from_multi_buffers(["py/multi/0", "py/multi/1"], [[t.data_ptr() for t in layers], [layers[0].data_ptr()]], [sizes, sizes[:1]])
        self.assertEqual(res, [0, 0])
        got = s.batch_get_into_multi_buffers(["py/multi/0", "py/multi/1", "py/multi/none"], [[t.data_ptr() for t in outs], [outs[0].data_ptr()], [outs[0].data_ptr()]], [sizes, sizes[:1], sizes[:1]])
        self.assertEqual(got, [sum(sizes), sizes[0], OBJECT_NOT_FOUND])
        for a, b in zip(layers, outs):
            self.assertTrue(torch.equal(a, b))
        loose = torch.zeros(64, 128)
        self.assertEqual(s.batch_put_from_multi_buffers(["py/multi/2"], [[loose.data_ptr()]], [[tensor_bytes(loose)]]), [INVALID_PARAMS])
        for t in layers + outs:
            s.unregister_buffer(t.data_ptr())

    def test_replicate_config_and_remove(self):
        s = self.store
        cfg = ReplicateConfig()
        cfg.replica_num = 1
        cfg.with_soft_pin = True
        self.assertEqual(s.put("py/rm/0", b"x" * 100, cfg), 0)
        self.assertEqual(s.put("py/rm/1", b"y" * 100), 0)
        self.assertEqual(s.put("py/rm/2", b"z" * 100), 0)
        self.assertEqual(s.get("py/rm/0"), b"x" * 100)  # a read takes a lease
        self.assertEqual(s.remove("py/rm/0"), OBJECT_HAS_LEASE)
        self.assertEqual(s.remove("py/rm/0", True), 0)
        self.assertEqual(s.remove("py/rm/0", True), OBJECT_NOT_FOUND)
        self.assertEqual(s.batch_remove(["py/rm/1", "py/rm/none"], True), [0, OBJECT_NOT_FOUND])
        self.assertEqual(s.remove_by_regex("^py/rm/", True), 1)
        self.assertEqual(s.is_exist("py/rm/2"), 0)

    def test_removed_by_another_client_stays_removed(self):
        # This store reads over the standalone's shared memory and keeps its
        # read leases; another client's forced removal must still reach it
        # (the bytes stay in the segment until the space is reused).
        s = self.store
        other = connect()
        try:
            val = os.urandom(200000)
            self.assertEqual(s.put("py/gone/0", val), 0)
            self.assertEqual(s.get("py/gone/0"), val)
            self.assertEqual(s.get("py/gone/0"), val)  # under the cached lease
            self.assertEqual(other.remove("py/gone/0", True), 0)
            self.assertEqual(s.get("py/gone/0"), b"")
            self.assertIsNone(s.get_buffer("py/gone/0"))
            self.assertEqual(s.is_exist("py/gone/0"), 0)
        finally:
            other.close()

    def test_many_threads(self):
        """Eight threads, one store, each with its own registered buffers."""
        s = self.store
        errors = []

        def worker(tid):
            try:
                src = torch.randn(16, 4096)
                dst = torch.zeros(16, 4096)
                blk = tensor_bytes(src[0])
                s.register_buffer(src.data_ptr(), tensor_bytes(src))
                s.register_buffer(dst.data_ptr(), tensor_bytes(dst))
                for rnd in range(5):
                    keys = ["py/thr/%d/%d/%d" % (tid, rnd, i) for i in range(16)]
                    if s.batch_put_from(keys, [src[i].data_ptr() for i in range(16)], [blk] * 16) != [0] * 16:
                        errors.append("put %d/%d" % (tid, rnd))
                    dst.zero_()
                    if s.batch_get_into(keys, [dst[i].data_ptr() for i in range(16)], [blk] * 16) != [blk] * 16:
                        errors.append("get %d/%d" % (tid, rnd))
                    if not torch.equal(src, dst):
                        errors.append("bytes %d/%d" % (tid, rnd))
                    src.add_(1)
                s.unregister_buffer(src.data_ptr())
                s.unregister_buffer(dst.data_ptr())
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertGreaterEqual(s.remove_by_regex("^py/thr/", True), 8 * 5 * 16)

    def test_no_available_handle_back_off(self):
        """Fill DRAM with hard-pinned blocks until the store answers -200,
        then put with back-off (as connectors do) while another thread frees
        space: the put must get through."""
        s = self.store
        blk = 4 << 20
        src = np.random.randint(0, 255, blk, dtype=np.uint8)
        self.assertEqual(s.register_buffer(src.ctypes.data, blk), 0)
        pin = ReplicateConfig()
        pin.with_hard_pin = True
        pinned = []
        try:
            rc = 0
            for i in range(1024):
                key = "py/full/%d" % i
                rc = s.put_from(key, src.ctypes.data, blk, pin)
                if rc != 0:
                    break
                pinned.append(key)
            self.assertEqual(rc, NO_AVAILABLE_HANDLE, "the store never reported full (%d pinned)" % len(pinned))
            self.assertGreater(len(pinned), 0)

            def free_later():
                time.sleep(0.3)
                s.batch_remove(pinned[: len(pinned) // 2], True)

            t = threading.Thread(target=free_later)
            t.start()
            refused, delay, deadline = 0, 0.01, time.time() + 30
            keys = ["py/full/late/%d" % i for i in range(2)]
            while True:
                res = s.batch_put_from(keys, [src.ctypes.data] * 2, [blk] * 2)
                if all(r == 0 for r in res):
                    break
                self.assertTrue(all(r in (0, NO_AVAILABLE_HANDLE) for r in res), res)
                refused += 1
                self.assertLess(time.time(), deadline, "still refused after 30 s")
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            t.join()
            self.assertGreater(refused, 0, "the batch was never refused: the test proved nothing")
            buf = np.zeros(blk, dtype=np.uint8)
            s.register_buffer(buf.ctypes.data, blk)
            self.assertEqual(s.get_into(keys[1], buf.ctypes.data, blk), blk)
            self.assertTrue(np.array_equal(buf, src))
            s.unregister_buffer(buf.ctypes.data)
        finally:
            s.remove_by_regex("^py/full/", True)
            s.unregister_buffer(src.ctypes.data)

    def test_init_all(self):
        # Mooncake's defaults; the master comes from KVTIER_MASTER (read when
        # the library loads), as there is no address argument.
        s = MooncakeDistributedStore()
        try:
            self.assertEqual(s.init_all("tcp", "", 0), 0)
            self.assertEqual(s.health_check(), 0)
            self.assertEqual(s.init_all("tcp", "", 0), INVALID_PARAMS)  # already set up
        finally:
            s.close()

    def test_close_and_errors_without_setup(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.put("k", b"v"), INVALID_PARAMS)  # not set up
        self.assertEqual(s.setup("localhost", "", 0, 0, "efa", "mlx5_0", MASTER), INVALID_PARAMS)
        self.assertEqual(s.setup("localhost", "", 0, 0, "tcp", "", MASTER), 0)
        self.assertEqual(s.setup("localhost", "", 0, 0, "tcp", "", MASTER), INVALID_PARAMS)
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.is_exist("k"), -1)
        self.assertEqual(s.get("k"), b"")
        self.assertEqual(s.batch_get_into(["k"], [1], [1]), [-1])

    def test_install_as_mooncake(self):
        store_mod = kvtier.install_as_mooncake()
        from mooncake.store import MooncakeDistributedStore as M
        from mooncake.store import ReplicateConfig as R

        self.assertIs(M, MooncakeDistributedStore)
        self.assertIs(R, ReplicateConfig)
        self.assertIs(sys.modules["mooncake.store"], store_mod)
        m = M()
        self.assertEqual(m.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", MASTER), 0)
        self.assertEqual(m.put("py/alias", b"via mooncake.store"), 0)
        self.assertEqual(self.store.get("py/alias"), b"via mooncake.store")
        m.close()

    def test_mooncake_path_for_spawned_processes(self):
        """An engine's worker processes import mooncake.store themselves:
        with kvtier.mooncake_path() on PYTHONPATH they get kvtier."""
        import subprocess

        code = (
            "from mooncake.store import MooncakeDistributedStore, ReplicateConfig\n"
            "import kvtier, os\n"
            "assert MooncakeDistributedStore is kvtier.MooncakeDistributedStore\n"
            "s = MooncakeDistributedStore()\n"
            "assert s.setup('localhost', 'P2PHANDSHAKE', 0, 0, 'tcp', '', os.environ['KVTIER_MASTER']) == 0\n"
            "assert s.put('py/spawned', b'from a worker') == 0\n"
            "print('ok')\n"
        )
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([kvtier.mooncake_path(), here]))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "ok")
        self.assertEqual(self.store.get("py/spawned"), b"from a worker")

    def test_error_names(self):
        self.assertEqual(kvtier.error_name(-704), "OBJECT_NOT_FOUND")
        self.assertEqual(kvtier.error_name(-200), "NO_AVAILABLE_HANDLE")
        self.assertTrue(os.path.isfile(kvtier.library_path()))


if __name__ == "__main__":
    unittest.main()
