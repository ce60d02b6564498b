// Package spdktest provides stand-ins for an SPDK application's JSON-RPC
// socket, for tests of kvtier/nof/spdk and of packages that drive SPDK
// (the appliance in --nvme-backend spdk mode). No SPDK runs on kvtier's test
// machines, so these are what the SPDK client is proven against.
//
// Server is a real Unix-socket server that applies SPDK v26.05's transport
// rules (lib/jsonrpc): back-to-back JSON values without framing, replies as
// one compact object followed by "\n" (a batch as one array), the id echoed
// verbatim, no reply to a successful notification (id absent or null) but an
// error reply with id null, -32600 "Invalid request" with id null for a bad
// id type, a wrong "jsonrpc" or an unknown member, -32600 with the id for
// scalar params, and on unparsable bytes an immediate close with nothing sent
// (not even replies queued from the same read). Options make it split replies
// across writes, hold and reverse them (out of order, several per read),
// close on a method, or send chosen bytes verbatim.
//
// Replay answers with the recorded replies embedded from
// shared/nvme-tcp-vectors/rpc (copied under vectors/): a request matches a
// recording by method and semantically equal params. TestServerFidelity
// checks that Server+Replay return every recording byte for byte when sent
// the recorded request bytes.
//
// FakeSPDK is a named fake: an in-memory model of the SPDK state the
// appliance manages (transports, malloc/aio/NVMe/lvol bdevs, lvstores,
// subsystems, namespaces, listeners, hosts). Its success and error replies
// copy the shapes, codes and messages of the recordings; where SPDK's
// behaviour was not recorded (e.g. deleting a missing bdev) it answers -19
// "No such device", which is what the recorded lookups of missing objects
// return. It exists because no SPDK can run here; it is not a simulator of
// I/O.
//
// Only tests may import spdktest.
package spdktest
