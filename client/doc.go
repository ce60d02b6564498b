// Package client is the kvtier data-plane SDK that GPU nodes, the CLI and the
// appliance use.
//
// A Client asks the master (over gRPC) where to write or read, then moves the
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
// A client may also be a storage node: with GlobalSegmentSize > 0 it maps that
// much memory and mounts it as MEMORY segments others may be allocated into;
// with LocalBufferSize > 0 it keeps a registered staging buffer. Either way it
// heartbeats the master and re-announces its segments on every beat.
//
// Importers: cmd/kvtier, appliance, rest adapters, tests. The client never
// imports package master: it speaks only the gRPC contract in api/kvtierpb.
package client
