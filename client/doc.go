// Package client is the kvtier data-plane SDK that GPU nodes, the CLI and the
// appliance use.
//
// A Client asks the master where to write or read (the gRPC contract of
// api/kvtierpb; unary calls travel over internal/fastrpc on the same port when
// the master offers it, Config.GRPCOnly turns that off), then moves the
// bytes itself through the transfer engine (internal/transfer): straight
// between the caller's buffer and the target segment, by memcpy when the
// segment lives in this process or in a same-host appliance's shared memory
// (mapped into this process; see internal/transfer "Shared memory"), over
// TCP otherwise. The master never carries object bytes.
//
// Put computes a CRC32C (Castagnoli, hardware accelerated) of the value, calls
// PutStart, writes every allocated replica in parallel, then PutEnd when every
// replica was written, else PutRevoke. A value of 4 MiB or more going to
// nodes reached over sockets sends its checksum with PutEnd instead
// (put.go, lateSum): the transfer engine checksums each slice as it sends
// it, so the value is read from memory once. A put whose bytes would cross TCP (one
// MEMORY replica, no NVMe-oF replica, at most Config.DirectPutMax = 4 MiB,
// an appliance announcing direct_put)
// instead goes as one direct-put frame to that appliance, which places,
// writes, checks and commits it (directput.go; internal/transfer "Direct
// puts"): one round trip instead of three; "no room here" there falls back
// to the three-trip path, and Config.DisableDirectPut (kvtier put and bench
// --direct-put=false) turns it off. BatchPut does the same with one frame
// for the batch. A key that is already stored (or being
// stored by another writer) with the same size is reported as success: keys
// are content-derived, so the first writer wins. Get calls GetReplicaList,
// picks replicas in the design's fixed priority (local MEMORY, any MEMORY,
// local NOF, any NOF, LOCAL_DISK), verifies the checksum, falls back to the
// next replica when one fails, and fails with LEASE_EXPIRED when the read lease
// ran out during the transfer (the bytes may have been evicted under it).
//
// The checksum a Get verifies is computed by the transfer engine while the
// bytes arrive (transfer.Request.Sum), not in a second pass over the
// buffer. With the lease cache (Config.LeaseCacheKeys, on by default) a Get
// of a key read recently reuses the replica list while the read lease the
// master granted still has more than LeaseCacheMargin to run (no master
// call); the checksum and the lease check after the transfer are
// unchanged, a failed read drops the entry and asks the master, and the
// client's own Remove drops it. The reads it serves are reported with the
// next heartbeat (HeartbeatRequest.cached_reads), so the master counts
// them for its eviction policies a beat late; a beat that fails loses
// them.
//
// View (view.go) is a read in place for front ends that run in the
// process serving the segments: it takes (or reuses) the read lease as Get
// does and returns the extent's bytes in segment memory without copying or
// checking them; the caller checks the CRC32C after using them and drops
// what it made from them when the check or the lease fails.
//
// Replica hints (Config.ReplicaHints, on by default) overlap the two round
// trips of a Get instead: for a key read before, the client starts reading
// the replica the previous answer named and asks the master at the same
// time; it keeps the bytes only when the new answer lists that same replica
// (type, segment, endpoint, offset, length, bucket) and they pass the
// answer's CRC32C, else it reads again from the answer. Every Get still asks
// the master. The cost of a stale hint is one wasted transfer (and, for a
// replica on an unreachable node, waiting for that transfer to fail, as
// the ordinary path would while the master still lists the node). A hint
// is of no use to a replica in this process: the local copy runs before the
// master call, not beside it.
//
// Batch calls (BatchPut, BatchGet, BatchGetInto, BatchExist and
// BatchExistEach, BatchRemove) are batched end to end: one master call for all keys (BatchPut: one
// BatchPutStart, one BatchPutEnd for the keys whose replicas were all
// written, one BatchPutRevoke for the rest), and every replica read or
// write of the call in one transfer batch, which travels over TCP as a few
// batch frames per appliance (internal/transfer "Batch frames") instead of
// a request and a response per key. Batch gets keep the single-key Get's
// lease cache and replica hints. Results are per key, in input order; a
// key fails alone (its checksum, its replica, its revoke, an empty key or
// value), never because a neighbour in the batch did (BatchExist, which
// answers one error for the call, is the exception; BatchExistEach is it
// per key). Keys a rebuilding master answers UNAVAILABLE_IN_CURRENT_STATUS
// are asked again for up to 5 s, as single calls are (rebuild.go).
//
// A client may also be a storage node: with GlobalSegmentSize > 0 it maps that
// much memory and mounts it as MEMORY segments others may be allocated into;
// with LocalBufferSize > 0 it keeps a registered staging buffer. Either way it
// heartbeats the master and re-announces its segments on every beat; each
// beat carries the heartbeat period, so the master suspects a node silent
// for 2.5 periods. Leave sends a last beat saying the node shuts down.
//
// A one-shot caller (Config.OneShot: the CLI verbs) never heartbeats, so
// the master never lists it as a node and its exit raises no events.
//
// OpenReader reads one object in ranges (ObjectReader.ReadAt), for callers
// that stream a large object (the REST API) and must not hold it whole; the
// caller verifies the CRC32C over the ranges it read.
//
// # Performance
//
// tests/bench_test.go measures Put and Get against a `kvtier standalone`
// process (master and appliance, offload off), interleaved chunk by chunk
// with plain Go TCP to a separate process (the re-executed test binary)
// moving the same bytes with the same number of callers and connections,
// and the same-process path against copy():
//
//	go test -run '^$' -bench 'ClientPutGet|SameProcessGet|MasterRoundTrip' -benchtime 1s ./tests/
//
// Ranges of runs on the 2-core VM (load average 1-5 from other work),
// ratio to raw TCP; "gRPC" is session 1's client (every master call over
// gRPC, no hints, hash/crc32; Config.GRPCOnly and ReplicaHints -1 today),
// "default" today's (internal/fastrpc, replica hints, internal/crc32c):
//
//	                         gRPC       default    default + LeaseCacheKeys
//	Get 64 KiB, 4 callers    0.14-0.28  0.38-0.50
//	Get  1 MiB, 4 callers    0.53-0.64  0.75-0.76  0.79-0.83
//	Get  1 MiB, 1 caller     0.46-0.48  0.74-0.83  0.76-0.81
//	Get 16 MiB, 4 callers    0.75-0.80  0.88-0.91  0.85-0.92
//	Get  1 MiB, 50 callers   0.46-0.50  0.49-0.50 (1.3-1.4 x one caller)
//	Put  1 MiB, 4 callers    0.39-0.42  0.55-0.59
//	Put 16 MiB, 4 callers    0.87-0.95  0.95-1.05
//	Put  1 MiB, 50 callers   0.57-0.62  0.59-0.71 (1.8-2.0 x one caller)
//	same process  1 MiB      0.15-0.22  0.43       0.71 x copy()
//	same process 16 MiB      0.42-0.51  0.94-1.04  0.95-1.04 x copy()
//	master GetReplicaList    192 µs     42-110 µs  (1.5-1.7 x a raw TCP ping-pong)
//	master PutStart+PutEnd   296 µs     79-200 µs
//
// Session 3 made the appliance's DRAM a memfd that clients on its host map
// (internal/transfer "Shared memory") and turned the lease cache on by
// default; the benchmark client runs on the appliance's host, so by default
// it copies instead of crossing loopback TCP. Two runs on a quiet machine,
// ratio to the same raw TCP baseline; "no cache" is LeaseCacheKeys -1
// (every Get asks the master); the TCP column is Transfer.
// DisableSharedMemory, the path remote clients take (slightly below the
// table above: shared DRAM uses 4 KiB pages on this host, see the README):
//
//	                         default    no cache   TCP only
//	Get 64 KiB, 4 callers    6.1-6.4
//	Get  1 MiB, 4 callers    3.4-3.9    1.77-1.82  0.76-0.82
//	Get  1 MiB, 1 caller     2.9-3.4    1.69-1.74  0.70-0.79
//	Get  1 MiB, 50 callers   4.0-4.6
//	Get 16 MiB, 4 callers    2.9-3.1    2.9-3.1
//	Put 64 KiB, 4 callers    0.32-0.35
//	Put  1 MiB, 4 callers    1.24-1.35             0.54-0.57
//	Put  1 MiB, 1 caller     0.92-1.07             0.51
//	Put  1 MiB, 50 callers   1.30-1.37
//	Put 16 MiB, 4 callers    2.8-3.1
//	same process  1 MiB      0.79-0.88  0.45-0.48  x copy()
//	same process 16 MiB      1.22-1.25  1.12       x copy()
//
// (The same-process rows are from after crc32c.CopyUpdate fused the copy
// and the checksum into one pass; before it they were 0.73 and 1.07-1.17.)
//
// Through shared memory a 1 MiB Get costs the master call plus one copy
// fused with the CRC32C check from memory that is rarely in cache (about
// 7 GB/s here); a 1 MiB Put costs the CRC32C, PutStart, one copy into cold
// segment memory and PutEnd, all on the caller's core.
//
// The raw baseline itself moved between 1.9 and 3.7 GB/s from run to run
// (one caller, 1 MiB), so compare ratios, not GB/s.
//
// What bounds them: a Get is one master call plus the transfer; with gRPC
// the call cost 170-330 µs of wall time here (four to six goroutine
// hand-offs a call, each a futex and often a virtual-CPU exit), about half
// of a 1 MiB transfer; the fast path brought it to ~40 µs, 1.7 x a bare
// ping-pong, and replica hints run it beside the transfer. hash/crc32 ran
// Castagnoli at ~20 GB/s, as long as the copy itself (24 % of the client's
// CPU on a 1 MiB Get); internal/crc32c runs ~3.7 x faster. A Put is three
// round trips in a row (PutStart, the write, PutEnd); with four callers on
// two busy cores each master call waits ~0.5 ms for a CPU (measured:
// PutStart 590 µs, write 920 µs, PutEnd 490 µs), which more callers
// overlap (50 callers: 0.6-0.7 x). The same-process path pays copy plus
// checksum; objects of 4 MiB and more spread them over the cores, and a
// 1 MiB local read is bound by its master call (40-110 µs against a 50 µs
// copy) unless the lease cache spares it. On an idle VM every wake-up is
// slower than on a busy one (a raw ping-pong: 24 µs busy, 73 µs idle).
//
// # Using it from another module
//
// The module is go-gettable: go get github.com/kvtier/kvtier/client. The
// error type and codes are in package github.com/kvtier/kvtier/kverr (match
// with kverr.Is or errors.Is(err, kverr.ObjectNotFound.Err())); every type
// of internal/ that the exported API names has an alias here (sdk.go), so an
// importer can spell it. example_test.go has runnable examples of Put, Get,
// GetInto and the batch forms against a real store. The C library (capi)
// and the Python package (python/kvtier) are built on this package.
//
// Importers: cmd/kvtier, appliance, capi, rest adapters, tests. The client never
// imports package master: it speaks only the contract in api/kvtierpb.
package client
