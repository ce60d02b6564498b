// Package fastrpc carries the unary methods of a gRPC service over a lean
// framed TCP protocol, on the same listener as the gRPC server, so that the
// small, latency-bound master calls of the data path (GetReplicaList,
// PutStart, PutEnd ...) do not pay HTTP/2's goroutine hand-offs.
//
// # Why
//
// On the 2-vCPU machines kvtier is measured on, a gRPC unary call between
// two processes costs ~190 µs of latency while a plain TCP ping-pong costs
// ~30 µs: each call crosses four to six goroutines (caller, loopy writer,
// reader, handler worker, and back), and every cross-core wake-up is a
// futex and often a virtual-CPU exit. A Get of 1 MiB moves its bytes in
// ~450 µs, so the master call is a third of its time. Here a call is one
// write and one read on a connection the caller holds alone, and the server
// answers from the goroutine that read the request: two wake-ups, like the
// ping-pong.
//
// # Contract
//
//   - The gRPC service stays the contract (api/kvtierpb). A Server
//     dispatches to the same generated method handlers, through the same
//     unary interceptor (metrics), with the same messages; errors travel as
//     the google.rpc.Status a gRPC server would have sent (codes, message,
//     details), so kverr.FromGRPC sees no difference.
//   - Server.Split shares one listener: a connection whose first four bytes
//     are the fast-path hello goes to the Server, any other (the HTTP/2
//     preface) to the returned listener, for grpc.Server.Serve.
//   - Conn implements grpc.ClientConnInterface over a fast-path pool with a
//     gRPC connection as fallback: unary calls go over the fast path, streams
//     and every call to a server that does not answer the hello (an older
//     master) go over gRPC. So kvtierpb.NewMasterClient(conn) works
//     unchanged.
//   - One call at a time per connection: a caller takes an idle connection
//     (or dials one, at most Config.MaxConns), writes its request, reads the
//     answer and puts the connection back. A pooled connection found closed
//     by the peer (a restarted master) is discarded before use, and the call
//     is made on a fresh one. A connection broken during a call fails that
//     call with codes.Unavailable, as gRPC does; it is never retried (the
//     request may have been executed).
//   - Deadlines: the caller's context deadline bounds the socket I/O and
//     travels in the request (timeout field) to bound the handler's context;
//     a cancelled context fails the call and drops its connection. The
//     context's end reaches the socket through context.AfterFunc alone (a
//     socket deadline set per call as well cost two more runtime timers a
//     call), and a call allocates nothing of its own on either side but
//     the messages and the contexts (BenchmarkCall: 23 allocations a call
//     with a deadline, 36 before).
//   - Authentication: a client's hello may carry a token (flag helloToken:
//     2-byte length, then the token, ClientConfig.Token). A server with
//     SetAuthenticate closes a connection whose token (or TLS client
//     certificate) it refuses before any call; the client then uses gRPC,
//     which names the refusal (UNAUTHENTICATED). Calls on an accepted
//     connection carry the token as `authorization: Bearer` metadata, so
//     the same interceptor checks both paths. Under TLS the master
//     terminates TLS on the listener before Split (ClientConfig.TLS on the
//     client side); SetConnContext hands the TLS state to the calls.
//   - Bad input: a frame with a bad magic, an unknown version, a method name
//     or payload length out of range closes that connection only; an
//     unknown method or an undecodable request is answered with
//     codes.Unimplemented / codes.InvalidArgument and the connection goes on.
//
// # Polling
//
// A put is two calls (PutStart, PutEnd) with the client's copy between
// them, so the master is idle between them, and on VMs whose idle vCPUs
// halt at once (this one: cpuidle haltpoll with guest_halt_poll_ns=0)
// every call then pays for waking the master's vCPU. So a server
// connection polls for its next request before it parks:
//
//   - After answering, a connection polls its socket for up to
//     Server.SetPoll (DefaultServerPoll, 1 ms), only while one of its last
//     four requests came within that of the answer before it (so a client
//     in a run of calls is polled for, a heartbeat every second never is),
//     and only while no other call is being answered.
//   - At most one goroutine per process polls at once; a poll stops as soon
//     as another call starts on its Server. A process with one P
//     (GOMAXPROCS 1) never polls: its spinning goroutine would keep the
//     scheduler from looking at the network, and every other connection
//     would wait for the poll to end (pollConn.wait has the figures).
//     Each round is a non-blocking
//     MSG_PEEK recv, then sched_yield(2) and runtime.Gosched, so any
//     runnable thread of any process and any goroutine of this one runs
//     first: a poll keeps its vCPU awake, it does not take it from work.
//     The read that follows is the ordinary one (deadlines, errors and end
//     of stream as before).
//
// Measured with kvtier bench on the 2-vCPU VM (standalone, one caller,
// 1 MiB puts through shared memory, 3 s each, settings alternated three
// times, 22:20 UTC): server polling 2.72-3.13 GB/s (p50 306-327 µs)
// against 1.85-2.23 (368-515 µs) without; at four callers within the
// noise (4.0-4.9 GB/s either way; the polls caught 7,349 of 29,376
// requests and gave up on 580); over TCP, where the transfer dominates a
// put, 0.86-1.19 GB/s either way. `kvtier master|standalone --rpc-poll`
// sets the bound; 0 turns polling off.
//
// Still open: with the master polling (it caught 22,737 of a single
// caller's 22,744 calls), a call made right after the caller was busy
// copying takes ~90-130 µs against ~30 µs back to back. Timestamps in both
// processes (1 MiB puts, one caller, 22:40 UTC): the master answers in
// ~15 µs, but its write of the ~150-byte answer took 107 µs on average and
// the caller waited 57 µs: the write wakes the caller's thread onto the
// master's vCPU, where it preempts the master. With the standalone pinned
// to one vCPU and the caller to the other (taskset), the master's write
// took 13 µs and the caller still waited 71 µs (its own vCPU had halted);
// a caller spinning on MSG_PEEK for its answer then cut the wait to
// 32-40 µs and reached 3.9-4.1 GB/s (p50 205-224 µs) against 2.9-3.1
// unpinned, but pinned callers lose at four callers (3.5-4.2 against
// 4.3-4.6 GB/s: they share one vCPU), pinning without the spin loses
// (2.5 GB/s), and unpinned a spinning caller gained little or lost (a
// caller polling with sched_yield and Gosched made back-to-back Exists
// slower, p50 27 → 53 µs). So callers do not poll and nothing is pinned;
// an operator who dedicates cores to the appliance (taskset, cpusets) gets
// the first half of that gain.
//
// # Wire protocol (version 1)
//
// All integers are big-endian. A connection opens with a hello, client
// first, answered by the server with the same eight bytes:
//
//	offset size field
//	0      4    magic "KVFR"
//	4      1    version = 1
//	5      3    reserved, 0
//
// Then, one at a time, a request frame:
//
//	offset size field
//	0      4    magic "KVFQ"
//	4      2    M = method name length, 1..255
//	6      2    reserved, 0
//	8      4    P = payload length, 0..MaxPayload (64 MiB)
//	12     4    timeout in milliseconds, 0 = none
//	16     M    full gRPC method name, e.g. "/kvtier.v1.Master/PutStart"
//	16+M   P    the request message, protobuf wire format
//
// answered by one response frame:
//
//	offset size field
//	0      4    magic "KVFS"
//	4      1    status: 0 = OK, 1 = error
//	5      3    reserved, 0
//	8      4    P = payload length, 0..MaxPayload
//	12     P    OK: the response message; error: a google.rpc.Status,
//	            protobuf wire format
//
// A gRPC server reading the hello as an HTTP/2 preface closes the
// connection, which is how a client learns that the fast path is absent.
//
// # Imports
//
// fastrpc imports grpc and protobuf only. cmd/kvtier puts a Server on the
// master's listener; client dials a Conn. Nothing else should need it.
package fastrpc
