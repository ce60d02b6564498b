// Package client is the kvtier data-plane SDK that GPU nodes, the CLI and the
// appliance use.
//
// A Client asks the master where to write or read (the gRPC contract of
// api/kvtierpb; unary calls travel over internal/fastrpc on the same port when
// the master offers it, Config.GRPCOnly turns that off), then moves the
// bytes itself through the transfer engine (internal/transfer): straight
// between the caller's buffer and the target segment, by memcpy when the
// segment lives in this process, over TCP otherwise. The master never carries
// object bytes.
//
// Put computes a CRC32C (Castagnoli, hardware accelerated) of the value, calls
// PutStart, writes every allocated replica in parallel, then PutEnd when every
// replica was written, else PutRevoke. A key that is already stored (or being
// stored by another writer) with the same size is reported as success: keys
// are content-derived, so the first writer wins. Get calls GetReplicaList,
// picks replicas in the design's fixed priority (local MEMORY, any MEMORY,
// local NOF, any NOF, LOCAL_DISK), verifies the checksum, falls back to the
// next replica when one fails, and fails with LEASE_EXPIRED when the read lease
// ran out during the transfer (the bytes may have been evicted under it).
//
// The checksum a Get verifies is computed by the transfer engine while the
// bytes arrive (transfer.Request.Sum), not in a second pass over the
// buffer. With Config.LeaseCacheKeys > 0 a Get of a key read recently
// reuses the replica list while the read lease the master granted still
// has more than LeaseCacheMargin to run (no master call); the checksum and
// the lease check after the transfer are unchanged, a failed read drops the
// entry and asks the master, and the client's own Remove drops it. It is
// off by default because cached reads neither extend the lease nor count
// as reads for the master's eviction policies.
//
// A client may also be a storage node: with GlobalSegmentSize > 0 it maps that
// much memory and mounts it as MEMORY segments others may be allocated into;
// with LocalBufferSize > 0 it keeps a registered staging buffer. Either way it
// heartbeats the master and re-announces its segments on every beat.
//
// # Performance
//
// tests/bench_test.go measures Put and Get against an appliance process,
// interleaved chunk by chunk with plain Go TCP to a separate process
// (the re-executed test binary) moving the same bytes with the same number
// of callers and connections, and the same-process path against copy():
//
//	go test -run '^$' -bench 'ClientPutGet|SameProcessGet' -benchtime 1s -count 2 ./tests/
//
// Ranges of 2 runs on the 2-core VM (load average 3-5), ratio to raw TCP:
//
//	                         before   after   after, LeaseCacheKeys
//	Get  1 MiB, 4 callers    0.42-0.46 0.58-0.64 0.79-0.84
//	Get 16 MiB, 4 callers    0.67-0.72 0.77-0.80 0.80-0.90
//	Get  1 MiB, 1 caller     0.46-0.53 0.35-0.48 0.76-0.80
//	Get  1 MiB, 50 callers   0.38-0.40 0.48-0.50 (1.5-1.9 x one caller)
//	Put  1 MiB, 4 callers    0.40-0.43 0.40
//	Put 16 MiB, 4 callers    0.91-0.95 0.89-0.95
//	Put  1 MiB, 50 callers   0.56-0.59 0.57-0.62 (2.7-2.9 x one caller)
//	same process  1 MiB      0.17-0.18 0.15-0.17 0.45-0.46 x copy()
//	same process 16 MiB      0.45-0.47 0.49-0.51 0.59-0.60 x copy()
//
// What bounds them: every master call to the separate master process costs
// 170-330 µs of wall time here (the same call to an in-process master: about
// 80 µs; a cross-process TCP ping-pong: 10-17 µs), so a 1 MiB Get (one
// call) and Put (PutStart + PutEnd) are bound by the master round trips,
// not by moving bytes; the transfer engine alone runs at about 0.9-1.0 ×
// raw TCP. The same-process path also pays copy plus CRC32C: copy runs at
// 18-24 GB/s and the hardware CRC32C at about 20 GB/s on one core, so with
// the checksum verified the bound is about 0.5 × copy() even with no
// master call.
//
// Importers: cmd/kvtier, appliance, rest adapters, tests. The client never
// imports package master: it speaks only the gRPC contract in api/kvtierpb.
package client
