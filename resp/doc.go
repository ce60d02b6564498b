// Package resp is kvtier's Redis protocol front end (`--resp-addr` on
// `kvtier standalone` and `kvtier appliance`): it owns the RESP2/RESP3
// parser and reply encoder, the command table, and the mapping of Redis
// string commands onto kvtier objects. It is a client of the store through
// the Go SDK (package client) like any other: on an appliance it uses the
// appliance's own client, whose segments live in the same process, so
// values move by memcpy to and from segment memory; the master decides
// where they go and never carries them. Importers: cmd/kvtier.
//
// # Protocol
//
// Requests are RESP arrays of bulk strings (what client libraries and
// `redis-cli --pipe` send) or inline commands (a line of words, with
// redis-server's quoting rules). Limits as redis-server's: 1,048,576
// arguments, a bulk string up to Config.MaxValueSize (512 MiB), an inline
// line up to the 16 KiB read buffer. A malformed request is answered with
// "-ERR Protocol error: ..." and the connection is closed, as redis-server
// does; no part of it runs. Replies are RESP2 until HELLO 3 switches the
// connection to RESP3 (null "_", maps "%"). Requests are pipelined: the
// replies to everything already received are written together, when no
// further request is waiting in the read buffer (or 64 KiB of replies
// accumulated). One goroutine serves each connection; Config.MaxClients
// (default 10,000) bounds them, and the listener survives running out of
// file descriptors (it waits and retries).
//
// Commands: GET, SET [EX s|PX ms|EXAT|PXAT] [NX|XX], EXISTS key...,
// DEL/UNLINK key..., MGET, MSET, PING, ECHO, QUIT, AUTH, HELLO [2|3 [AUTH
// user pass] [SETNAME n]], SELECT 0, CLIENT SETNAME/GETNAME/ID/SETINFO/
// INFO/LIST, INFO [server|clients|memory|stats|keyspace], DBSIZE, SCAN
// cursor [MATCH p] [COUNT n] [TYPE string], TTL, PTTL, EXPIRE, PEXPIRE,
// PERSIST, TYPE, STRLEN, COMMAND [COUNT|INFO|DOCS], CONFIG GET pattern
// (maxmemory*, and save/appendonly/databases/maxclients that tools read).
// Anything else is "-ERR unknown command '...'", redis-server's wording.
// Every argument is checked before the store is touched: a syntax error
// changes nothing.
//
// # Errors
//
// A refusal by the store is an error reply whose message starts with the
// kvtier code name, e.g. "-ERR OBJECT_HAS_LEASE key=...". Out of space
// (NO_AVAILABLE_HANDLE, QUOTA_EXCEEDED, OBJECT_COUNT_EXCEEDED) uses its own
// error word, "-NOSPACE NO_AVAILABLE_HANDLE ...", so that a client can
// back off on it without parsing the message.
//
// # Mapping onto kvtier objects
//
// kvtier objects are immutable, write-once and evicted by the master in
// read-lease order (pinned objects last); Redis strings are mutable and
// live until deleted or expired. Where the two differ:
//
//   - SET of an existing key replaces it, as Redis users expect. When the
//     stored value has the same size and the same bytes (content-derived
//     keys put twice: the common case for KV caches) nothing is written
//     (so a soft pin from an earlier SET ... EX stays, where Redis would
//     clear the TTL).
//     Otherwise the old object is removed (force: a reader's lease does
//     not make SET fail) and the new one put. While another writer's put
//     of the key is in flight SET waits for it (up to ~40 retries, a few
//     ms each) and then replaces its value. Not atomic: a reader between
//     the removal and the put sees a miss (never a mix of the two values),
//     and another SDK client holding a read lease on the old object may
//     read the old value until its lease ends (a lease promises bytes;
//     reads through this front end drop it at once).
//   - NX sets only when the key is absent and no put of it is in flight;
//     XX only when it exists. MSET is SET per pair, in order, not atomic.
//   - Empty values: kvtier stores no zero-size object; SET k "" is refused
//     with INVALID_PARAMS.
//   - EXISTS answers from the master's replica list, which grants the read
//     lease a GET takes (--lease-ttl, 5 s by default): a key counted as
//     present is not evicted before the GET that follows, so "EXISTS true"
//     implies the next GET succeeds (LMCache's Redis backend relies on
//     it; tests/resp_test.go TestRESPExistsImpliesGet proves it while
//     eviction runs). The SDK's Exist never extends a lease (the design's
//     rule against probes pinning everything); through Redis, EXISTS is a
//     read without the bytes, and an engine that probes keys it never
//     reads holds each for one lease time.
//   - GET of a key still being written, or whose bytes failed their
//     checksum, is a miss (nil), never wrong bytes. A GET whose read lease
//     ran out during the copy is retried.
//   - DEL/UNLINK remove with force (past read leases); a key whose put is
//     in flight is removed when the put ends (the same retries as SET),
//     else reported as an error after the other keys were removed.
//   - Expiry: kvtier never deletes an object at a deadline; it evicts under
//     memory pressure in lease order. SET ... EX/PX and EXPIRE/PEXPIRE
//     soft-pin the object for that time: it is evicted only after
//     unpinned objects, until the pin ends, then it is an ordinary object
//     that stays until evicted. TTL/PTTL report the soft pin's time left,
//     -1 when no pin runs (no deadline), -2 for a missing key. So a key
//     may outlive its TTL (it is not expired) and may, under pressure
//     from other pinned objects, be evicted before it. Pins are set when
//     an object is put, so EXPIRE and PERSIST re-store the value (read,
//     remove, put with the pin): not atomic, and the pin may not exceed
//     the master's maximum soft-pin time (24 h by default; a longer one
//     is refused with INVALID_PARAMS and the value is kept unpinned).
//     EXPIRE with a time <= 0 deletes the key, as in Redis. PERSIST soft-
//     pins for the master's default soft-pin time (30 min): the nearest
//     kvtier promise to "keep this key"; TTL then shows that time. INFO's
//     expired_keys is always 0; evicted_keys is the master's eviction
//     count.
//   - One database: SELECT 0 only. DBSIZE, INFO keyspace and SCAN cover the
//     client's tenant's objects (DBSIZE the master's object count).
//   - SCAN walks the master's listing in key order. Redis clients expect a
//     decimal cursor, so the front end keeps the listing position (the
//     last key) under a numeric cursor (the last 65,536 cursors issued are
//     remembered; an older one is "invalid cursor"). COUNT is how many
//     keys are listed per call (default 10), MATCH filters them (its
//     literal prefix narrows the listing), so a call may return fewer
//     keys, even none, before the cursor is 0. Keys put after the scan
//     began are returned when they sort after the cursor, as Redis allows.
//   - INFO memory reports the DRAM tier (used_memory, maxmemory) and
//     maxmemory_policy allkeys-lru, the nearest Redis policy to lease
//     order; CONFIG SET is refused (tiers are set with `kvtier tiers set`).
//   - AUTH: without Config.Password every connection is authenticated and
//     AUTH answers redis-server's "called without any password configured"
//     error; with one, every command but AUTH, HELLO and QUIT answers
//     NOAUTH until it is given (user "default" or none).
//
// # Copies
//
// A value is never copied into a fresh heap allocation per request:
// arguments of 16 KiB and more are read from the socket straight into a
// pooled buffer (power-of-two classes on bounded free lists), and GETs read
// into one. What remains, per 1 MiB value:
//
//   - SET: kernel -> pooled buffer (the socket read), then the SDK's Put:
//     a CRC32C pass and pooled buffer -> segment memory (memcpy in this
//     process, non-temporal stores). Reading the socket straight into the
//     segment would save the second copy, but the checksum is sent with
//     PutStart, before the bytes arrive, and a slow client would hold a
//     PROCESSING reservation while they trickle in.
//   - GET: segment memory -> pooled buffer (the SDK's read, fused with the
//     CRC32C check), then one writev from the pooled buffer into the
//     kernel. Writing from segment memory itself would save the first,
//     but the checksum would be verified after the bytes were on the wire,
//     and an eviction during a slow send could not be taken back.
//   - Values under 16 KiB are copied out of the read buffer into a per-
//     connection arena and replies are assembled in a per-connection
//     buffer: cheaper than a system call each at that size.
//
// # Performance
//
// tests/resp_bench_test.go (BenchmarkRESP) runs redis-benchmark (-t
// set,get, one key, as redis-benchmark does without -r) against this front
// end and against redis-server started with the same flags in the same
// run (no persistence), round by round in turn, and reports the medians
// and their ratio:
//
//	go test -run '^$' -bench RESP -benchtime 1x ./tests/
//
// Four runs (3, 5, 3 and 3 rounds) on the 2-vCPU VM shared with six other
// builds (load average 10-16, so single rounds swing 2-3x), ratio
// kvtier / redis-server of the medians, SET and GET:
//
//	             1 client     4 clients    50 clients
//	1 MiB SET    0.21-0.50    0.70-1.07    0.68-1.10
//	1 MiB GET    0.58-3.0     0.56-0.76    0.86-1.41
//	4 KiB SET    0.50-0.65    0.26-0.98    0.35-0.65
//	4 KiB GET    0.53-0.77    0.58-0.66    0.35-0.73
//
// (The 3.0 is one run in which redis-server's GET rounds fell to 740
// req/s; take the lower ends as typical.)
//
// The targets (at least 1 x redis-server, 2 x at 50 clients) are
// not met. What bounds each case:
//
//   - 1 MiB: redis-server moves a value once in user space at most (SET
//     reads the socket into the object it keeps; GET writes from it).
//     Here a SET of a key already holding that value reads the socket into
//     a pooled buffer, then reads the stored value (copy and CRC32C check,
//     the SDK's Get) and compares (redis-benchmark sets one key over and
//     over); a GET copies and checks the stored value before the writev.
//     That is one to two more passes over each MiB on cores that also run
//     redis-benchmark. At 50 clients redis-server's one thread is the
//     bound and kvtier's connections spread over both cores. Before the
//     value buffers left sync.Pool (see bufPool) 1 MiB SETs at 50 clients
//     ran at 0.47 x; before SET compared first, every SET of an existing
//     key cost three master calls more.
//   - 4 KiB: per-request costs are system calls and wake-ups. A goroutine
//     per connection reads, answers, then reads again (EAGAIN) and parks
//     in the network poller, and is woken for the next request; redis-
//     server's event loop reads and writes only. A GET of 4 KiB costs the
//     SDK 0.6 us (lease cache, copy, CRC32C); a RESP round trip from a Go
//     client in the same process costs 7 us for PING and 15 us for a 4 KiB
//     GET. Polling the socket after an answer (as internal/fastrpc does)
//     made no measurable difference here and was left out.
//
// Removing the user-space copies needs an SDK read that hands out segment
// memory under a lease and a put that checksums after the bytes arrive
// (see "Copies").
package resp
