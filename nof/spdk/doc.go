// Package spdk drives an SPDK application (nvmf_tgt or spdk_tgt) over its
// JSON-RPC 2.0 Unix socket: a typed client (Client) and a Manager that makes
// SPDK export a planned set of NVMe namespaces over NVMe/TCP. The appliance
// uses it in --nvme-backend spdk --spdk-socket PATH mode. It imports only
// kverr; the appliance, cmd/kvtier and tests may import it.
// SPDK's own Go module (github.com/spdk/spdk/go/rpc) is not used: the module
// proxy refuses it, and it cannot have two calls in flight.
//
// # Wire format (SPDK v26.05, lib/jsonrpc; proven against the recordings)
//
// A Unix stream socket (default /var/tmp/spdk.sock) carries back-to-back JSON
// values with no length prefix or delimiter; whitespace between values is
// allowed. A request is one compact object
//
//	{"jsonrpc":"2.0","id":N,"method":"name","params":{...}}
//
// with params omitted when there are none (params must be an object or an
// array). The client always sends an id: a positive integer counting from 1
// per Client (an id-less request is a notification, whose success SPDK never
// answers). Replies are one compact object each, followed by "\n":
//
//	{"jsonrpc":"2.0","id":N,"result":<value>}
//	{"jsonrpc":"2.0","id":N,"error":{"code":<int>,"message":"<text>"}}
//
// and a batch request (a JSON array) is answered by one array. SPDK sends
// replies in completion order, so several outstanding calls on one connection
// are answered out of order; the client matches them by id. Codes are the
// JSON-RPC ones (-32600 invalid request, -32601 method not found, -32602
// invalid params, -32603 internal), -1 (method not allowed in the current
// framework state) and negative errno values (-19 "No such device", ...).
// They reach the caller unchanged as *RPCError. A reply with id null (SPDK
// could not read the request's id) is given to the one outstanding call if
// there is exactly one, else counted as an orphan (Stats). On unparsable
// input SPDK closes the connection and sends nothing.
//
// # Framing
//
// Framer splits the stream by bracket depth outside JSON strings (with
// backslash escapes), accepting only objects and arrays at top level and at
// most 32 MiB per value (SPDK's reply limit). It never rescans a byte, so a
// reply split over many reads costs one pass; several replies in one read
// come out one by one. Any framing or decoding error marks the connection
// broken: there is no resynchronisation point in such a stream.
//
// # Client contract
//
// Client is safe for concurrent use; any number of calls may be outstanding.
// One goroutine per connection reads replies and routes them by id. Every
// call takes a context (Config.CallTimeout, default 60 s, applies when it has
// no deadline). A call abandoned by its context leaves no state behind; its
// late reply is counted and dropped. When the socket breaks, every call
// outstanding on it fails with ErrConnLost (it may or may not have taken
// effect in SPDK) and the next call dials again; calls are not retried
// automatically because most SPDK methods are not idempotent. No lock is held
// while dialing, writing or reading.
//
// # Manager contract
//
// Manager.Apply(plan) reads SPDK's state, reuses what already matches,
// creates what is missing (transport, NVMe controllers by PCIe or TCP
// address, aio files, malloc disks, an lvol store and lvols, keyring_file
// keys), and makes the subsystem's namespaces, allowed hosts (with their
// DH-HMAC-CHAP keys: nvmf_subsystem_add_host dhchap_key/dhchap_ctrlr_key,
// nvmf_subsystem_set_keys when they changed) and listener exactly the
// plan's. A key of a planned name at another path is a conflict. An
// object of a planned name with other attributes is left alone and reported
// with ErrConflict. Re-running Apply after any failure converges; a second
// Apply of the same plan makes no changing calls. Teardown removes what the
// plan describes, dependency-ordered, skipping what is already gone.
//
// # Caveats
//
//   - Recorded SPDK behaviour (shared/nvme-tcp-vectors/rpc) is replayed byte
//     for byte by spdktest; the Manager is tested against spdktest.FakeSPDK,
//     which copies the recorded shapes and errors. Errors SPDK was not seen
//     to return (deleting a missing object, duplicate listener) are guessed
//     in the fake; the Manager does not depend on them because it checks
//     before it changes.
//   - bdev_nvme_attach_controller may succeed with no bdevs when namespace
//     UUIDs collide with existing bdevs (recording 61); Apply detaches again
//     and fails with an explanatory error.
//   - PCIe SSDs must already be bound to vfio-pci/uio (SPDK's setup.sh).
//   - The keyring methods and DH-HMAC-CHAP host keys were not recorded; their
//     params and errors follow SPDK v26.05's source (module/keyring/file,
//     lib/nvmf/nvmf_rpc.c) and TestRealSPDKDHCHAP checks them against a
//     real nvmf_tgt where one is built (KVTIER_SPDK_DIR).
package spdk
