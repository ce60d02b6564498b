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
// accumulated). One goroutine serves each connection (with
// Config.EventLoop, an event loop serves the short requests; see "Event
// loop"); Config.MaxClients
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
//     XX only when it exists. MSET is SET per pair, in order, not atomic:
//     a pair that can never be stored (an empty key or value) refuses the
//     whole MSET before any is stored, but a store failure midway leaves
//     the pairs before it stored.
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
//     ran out during the copy is retried. Exception: a value of 16 KiB or
//     more sent from segment memory is checked after it was sent (see
//     "Copies"); when that check fails the connection is closed before
//     the reply is complete, and later GETs of the key (for a minute) are
//     a miss.
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
// pooled buffer (power-of-two classes on bounded free lists). When the
// front end runs in the process that serves the DRAM segments (`kvtier
// standalone` and `kvtier appliance` set Config.Segments), values are
// read in place, from segment memory, under the read lease the master
// granted (client.View); elsewhere (or for a replica on SSD or on another
// box) through the SDK's Get into a pooled buffer. Per value:
//
//   - GET, 16 KiB and more: one writev from segment memory into the
//     kernel, with the buffered replies and the header before it. The
//     CRC32C is checked after the kernel copied the bytes (one read pass,
//     the bytes still in cache), and the bulk string's final CRLF is sent
//     only then: a value whose check fails is never complete on the wire;
//     the connection is closed instead, and the key is read through the
//     copying path (check first, then send; a miss for bad bytes) for the
//     next minute. The check also catches bytes changed under the send:
//     the lease had ended, or the extent was freed and reused. What the
//     socket does not take at once (a client that does not read) is
//     copied to a pooled buffer, checked with the rest, and sent from
//     there, so a slow client never holds segment memory.
//   - GET, under 16 KiB: segment memory -> reply buffer, fused with the
//     CRC32C check; a failed check drops the reply from the buffer and
//     takes the copying path (a miss).
//   - SET of a key that holds a value of the same size: the bytes
//     received (kernel -> pooled buffer) are compared with segment memory
//     in place; equal bytes are the check (the stored checksum was
//     computed from the bytes their writer sent), and nothing is written.
//     For a plain SET (no options) of 16 KiB or more the comparison runs
//     while the value arrives, without the key's lock (the client may be
//     slow). On a TCP connection (watch.go) the bytes go kernel -> a
//     128 KiB bounce buffer, are compared there and dropped: an equal
//     value is never written to memory of ours, which halves the memory
//     traffic of the common case (SET 1 MiB at 1 client, main against
//     this in one run: 211-219 -> 191-192 us of CPU per request, beside
//     redis-server's 196-215; medians of 15 rounds, two runs). The
//     dropped bytes are the stored value's, so they are taken back from
//     segment memory into the value buffer when something stops the
//     comparison: a byte that differs (the rest is read straight into the
//     buffer), a removal of the key by this front end (it makes every
//     comparison of the key take its prefix back first: Server.watching,
//     under the key's exclusive lock), or the read lease nearing its end
//     (a second before it; a read waiting for a slow client wakes then).
//     The master frees nothing under the lease, so the prefix taken back
//     is the stored bytes. Should the goroutine not run for that second,
//     the SET fails with LEASE_EXPIRED and stores nothing. Elsewhere the
//     value is read into its buffer 128 KiB at a time and compared
//     there; the comparison counts only if the key's replica list and
//     lease grant are unchanged afterwards (checked under the lock; a
//     removal by this front end drops the list), else the value is
//     compared again. Long arguments are read in reads as large as what
//     is left of them (not 128 KiB at a time).
//     Other values: kernel -> pooled buffer, then the SDK's Put (a CRC32C
//     pass, the checksum goes with PutStart, then a copy into the
//     segment with non-temporal stores). Reading the socket straight into
//     the allocated extent would save that copy, but PutStart carries the
//     checksum before the bytes arrive, and a slow client would hold a
//     PROCESSING reservation while they trickle in.
//   - Replies are assembled in a per-connection buffer and written when no
//     further request is waiting in the read buffer (pipelining: one write
//     per burst); short arguments are copied out of the read buffer into
//     a per-connection arena.
//
// A key-sharded lock (Server.keyLock) orders reads against this front
// end's own removals: every read holds its shard shared from taking the
// replica list (or the SDK's cached one) until the bytes are checked; SET
// that replaces, DEL, EXPIRE and PERSIST hold it exclusively around the
// forced Remove. So a GET concurrent with a SET of the same key sees the
// old or the new value, and never has its extent reused under it. A
// forced Remove by another SDK client breaks the read lease too; the check
// after the send catches it (connection closed, as above).
//
// Socket reads and writes under 64 KiB are raw system calls on the
// non-blocking socket, waiting in Go's network poller only when it has
// nothing to read or no room (syscall.RawConn): through net.Conn every
// call entered the scheduler (entersyscall), and with one short request
// after another the runtime's monitor thread handed the P of a goroutine
// in a system call to another thread every few calls (futex wake-ups),
// which cost 4 KiB requests half of their CPU time. One goroutine serves
// each connection and runs its commands itself (no hand-off per request).
//
// # Event loop
//
// With Config.EventLoop (`--resp-event-loop`, Linux, off by default)
// connections are served as redis-server serves them: event loops (one
// per 4 CPUs, at least one), each a goroutine owning an epoll instance
// (level-triggered) and waiting for it in Go's network poller,
// connections spread over them. Each round a loop reads every ready
// connection once (as much as its 16 KiB read buffer takes), runs the
// whole commands that arrived (scan checks a command is complete before
// the parser sees it, so the loop never waits for the socket) and writes
// their replies with one write. No goroutine parks or wakes per request,
// and no read finds the socket empty: the next epoll_pwait says which
// connection has bytes (after a round that ran several commands the loop
// polls for 20 us before it parks). What could wait goes to a goroutine
// of the connection's own (today's path), which gives it back to the loop
// once its read buffer is empty (after a short command: while long ones
// follow each other it keeps the connection): an argument of 16 KiB or
// more (a long SET is read and compared as it arrives), a command longer than the read
// buffer, a command outside the loop's set (command.inline: DEL, MSET,
// MGET, SCAN, EXPIRE, PERSIST, INFO, DBSIZE, CONFIG, COMMAND, ... which
// list, remove or retry), a SET that replaces a different value (removal
// and put may retry while another writer's put is in flight; nothing is
// changed before the hand-over, the goroutine runs it from the start),
// and replies the socket
// did not take at once (kept in order, sent by the goroutine: a slow
// client never stalls a loop). Still run inline: one master round trip
// when a GET or SET misses the SDK's lease cache, and a GET of a value
// not in this process's segments (read through the SDK); a loop's other
// connections wait for those. An in-place GET of a long value writes what
// the socket takes and queues the rest as above.
//
// # Performance
//
// tests/resp_bench_test.go (BenchmarkRESP) runs redis-benchmark (-t set or
// get, -P 1, one key, as redis-benchmark does without -r) against this
// front end in `kvtier standalone` and against redis-server started with
// the same flags in the same run (no persistence), round by round in turn,
// and reports the medians, their ratio, and each server's CPU time per
// request; for 1 MiB it adds a ceiling server (a constant GET reply from
// memory, SET dropped), the most redis-benchmark can show on the machine:
//
//	go test -run '^$' -bench RESP -benchtime 1x ./tests/
//
// Figures are in the README ("Measured"). On the 2-vCPU VM shared with
// other builds and benchmarks, single rounds swing 2-3x; CPU time per
// request is the steadier figure. What bounds each case:
//
//   - 1 MiB: the kernel's loopback TCP copy, on both servers. A GET costs
//     kvtier one CRC32C read pass more than redis-server (the check). A
//     SET of the stored value (redis-benchmark without -r sets one key to
//     the same bytes) costs one compare pass against segment memory, made
//     cheap by the bounce buffer (see "Copies": profiled at 1 client, the
//     compare was 17-29% of the CPU and the copy out of the kernel into a
//     value buffer that had dropped out of cache 25-27%); redis-server
//     allocates, fills and frees a 1 MiB buffer instead. In 4 runs of 5-7
//     alternated rounds (2026-12-02 05:47-05:59 UTC, load 5-10) SET was
//     1.02-1.13 x redis-server at 1 client. Measured on the way and
//     dropped: one read per value with SO_RCVLOWAT set to what is left of
//     it (a connection stalled with the sender window-limited and the
//     receiver waiting for the mark); spinning on the socket for 30 or
//     100 us in the middle of a value, and touching the next 128 KiB of
//     segment memory while waiting for the socket (both within noise).
//   - 50 clients, 1 MiB: redis-benchmark (one thread) sets the rate.
//     Over a run it is on a CPU or queued for one (schedstat run_delay)
//     98-100% of its wall time against kvtier and against the ceiling,
//     85-99% against redis-server (BenchmarkRESP reports it,
//     *_loadgen_busy+queued_*): it hardly ever waits for the server.
//     The ceiling, a server doing no work, gets 0.92-1.49 x
//     redis-server's rate (medians of 4 runs); no server can show 2 x
//     redis-server with this client on these 2 vCPUs. Pinning
//     redis-benchmark to one vCPU and redis-server to the other, kvtier
//     free on both (KVTIER_RESP_CLIENT_CPUS=0 KVTIER_RESP_REDIS_CPUS=1),
//     one run: SET 1.95 x, GET 1.10 x at 50 clients, with the ceiling at
//     1.96 / 1.14 x: redis-server then shares its one vCPU with the
//     other jobs on the box, so this measures the box, not the servers.
//   - 4 KiB: system calls and wake-ups, as for any server; a goroutine per
//     connection costs one more read per request than redis-server's
//     event loop (the read that finds the socket empty before the
//     goroutine parks; Go's poller is edge-triggered, so it must). A null
//     server with a goroutine per connection (bufio, no store) measured
//     the same requests per second as this front end beside redis-server
//     at 50 clients. Spinning on the socket after an answer was tried and
//     cost CPU without gain. Heap allocations per request (the whole
//     process, TestAllocsPerShortCommand): GET 2 (the key as a string for
//     the SDK's and this package's maps; the checksum state in
//     crc32c.CopyUpdate), SET of the stored value 1 (the key), down from
//     8 each (a closure per socket read and write, the bulk terminator);
//     CPU per request fell 0-16% with it, within the noise at 1 and 4
//     clients.
//   - 4 KiB with the event loop (Config.EventLoop; BenchmarkRESP runs a
//     second kvtier with --resp-event-loop in the same rounds, kvloop_*):
//     two runs of 5 rounds (2026-12-02 03:52-03:56 UTC), against the
//     goroutine mode: GET / SET at 1 client 0.89-0.98 / 0.98-1.49 x, at
//     4 clients 1.21-1.49 / 1.27-1.40 x, at 50 clients 1.06 / 1.00-1.07
//     x; CPU per request 14-15.5 / 10-17 us against 12.5-13 / 10-16.5 at
//     1 client, 9-10 / 8-10 against 12-13.5 / 12-13 at 4, 5.5-7 against
//     6.5-8 at 50 (redis-server 3.5-5.5). Against redis-server at 50
//     clients: 0.82-0.96 x (the goroutine mode 0.77-0.92 x). At 1 client
//     each request still costs the loop a poll that finds nothing before
//     it parks (epoll_pwait instead of the goroutine's empty read: the
//     same count of system calls) and a wake-up; the loop gains where a
//     round serves several connections. Measured on the way: a loop
//     blocked in epoll_wait (a system call: the runtime's monitor hands
//     its P to another thread each round) cost 30 us per request at 1
//     client; two loops on 2 vCPUs woke more per request than one; a
//     1 MiB SET handed to the goroutine and back each time cost 15-45%
//     more CPU (the connection now stays with its goroutine while long
//     arguments follow each other: 1 MiB is 0.96-1.17 x the goroutine
//     mode, CPU alike). Not yet tried: taking the sockets out of Go's
//     poller (it registers EPOLLOUT too, and wakes as ACKs free send
//     space) and parking without the empty poll. So the event loop stays
//     off by default: it is not faster at 1 client.
package resp
