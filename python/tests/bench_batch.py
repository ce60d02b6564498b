"""Throughput of batch_put_from / batch_get_into through kvtier's Python
package, for capi's BenchmarkPythonVsGoSDK (which runs the Go SDK's batch
calls against the same store in the same run).

    python3 bench_batch.py MASTER_ADDR [--block BYTES] [--batch N] [--rounds N] [--threads N] [--serve]

Each round puts `batch` fresh blocks from a registered buffer (timed), reads
them back into another registered buffer (timed), checks the bytes and
removes them (not timed). Prints one JSON line: bytes and seconds per
direction. With --serve the process stays up and runs one measurement per
line read from stdin (the number of rounds), so a long-lived Python process
is compared with a long-lived Go one: the first touch of the store's shared
memory in a fresh process is paid once, as in the Go benchmark.
"""

import argparse
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from kvtier import MooncakeDistributedStore  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("master")
    ap.add_argument("--block", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag", default="py")
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()

    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", a.master)
    if rc != 0:
        raise SystemExit("setup: %d" % rc)
    run = os.urandom(4).hex()
    n, blk = a.batch, a.block
    bufs = []
    for _ in range(a.threads):
        src = np.random.randint(0, 255, n * blk, dtype=np.uint8)
        dst = np.zeros(n * blk, dtype=np.uint8)
        s.register_buffer(src.ctypes.data, src.nbytes)
        s.register_buffer(dst.ctypes.data, dst.nbytes)
        bufs.append((src, dst))
    seq = [0]

    def measure(rounds):
        totals = {"put_bytes": 0, "put_s": 0.0, "get_bytes": 0, "get_s": 0.0, "errors": 0}
        lock = threading.Lock()
        seq[0] += 1
        phase = seq[0]

        def worker(tid):
            src, dst = bufs[tid]
            sp = [src.ctypes.data + i * blk for i in range(n)]
            dp = [dst.ctypes.data + i * blk for i in range(n)]
            sizes = [blk] * n
            put_s = get_s = 0.0
            errors = 0
            for r in range(rounds):
                keys = ["bench/%s/%s/%d/%d/%d/%d" % (a.tag, run, phase, tid, r, i) for i in range(n)]
                t0 = time.perf_counter()
                res = s.batch_put_from(keys, sp, sizes)
                t1 = time.perf_counter()
                got = s.batch_get_into(keys, dp, sizes)
                t2 = time.perf_counter()
                put_s += t1 - t0
                get_s += t2 - t1
                if res != [0] * n or got != sizes:
                    errors += 1
                elif r == 0 and not np.array_equal(src, dst):
                    errors += 1
                s.batch_remove(keys, True)
            with lock:
                totals["put_bytes"] += rounds * n * blk
                totals["get_bytes"] += rounds * n * blk
                totals["put_s"] = max(totals["put_s"], put_s)
                totals["get_s"] = max(totals["get_s"], get_s)
                totals["errors"] += errors

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps(totals), flush=True)

    if a.serve:
        for line in sys.stdin:
            if line.strip():
                measure(int(line))
    else:
        measure(a.rounds)
    s.close()


if __name__ == "__main__":
    main()
