// Package rdma is the RDMA verbs transport for kvtier's transfer engine:
// one-sided RDMA READ and WRITE between a local registered buffer and a
// remote registered memory region (address + rkey), over reliable-connected
// (RC) queue pairs, through libibverbs via cgo.
//
// The real implementation is built only with the build tag "rdma" (and
// cgo, and Debian's libibverbs-dev). Without the tag the package still
// builds everywhere: Available reports false, Reason says why, and every
// constructor returns ErrUnavailable. The pure-Go parts (the side-channel
// format and handshake) are built and tested in both modes. Importers: the
// transfer engine (internal/transfer's RDMA transport, rdma_on.go: segments
// as memory regions, one-sided requests, --rdma-device) and, if ever
// needed, the appliance; nothing else (tests/layering_test.go). It imports
// only kverr.
//
// # API (tag rdma)
//
//	Available() bool; Reason() string; DeviceNames() ([]string, error)
//	OpenDevice(name string, cfg Config) (*Device, error)       // "" = first device
//	(*Device).RegisterMemory(buf []byte) (*MR, error)          // MR.Addr, MR.RKey, MR.LKey
//	(*Device).Listen(addr string) (*Listener, error); (*Listener).Accept(ctx) (*Conn, error)
//	(*Device).Dial(ctx, addr string) (*Conn, error)
//	(*Conn).Read(ctx, local []byte, remoteAddr uint64, rkey uint32) error
//	(*Conn).Write(ctx, local []byte, remoteAddr uint64, rkey uint32) error
//
// local must lie inside a region registered on the same Device. Registered
// memory is pinned for the Go runtime (runtime.Pinner) until MR.Close, so Go
// heap buffers may be registered as well as mmap'd segments.
//
// # Side channel (QP information exchange)
//
// Dial opens a TCP connection to the Listener's address. Each side writes its
// 40-byte QPInfo, reads the peer's, moves its QP to RTR (with the peer's QPN,
// PSN, LID/GID) and RTS, then writes one byte 0x01 ("ready") and waits for
// the peer's; only then may one-sided work requests be posted (the peer's QP
// must be past RTR). The TCP connection is then closed. QPInfo, big-endian:
//
//	offset size field
//	0      4    magic "KVRD"
//	4      1    version = 1
//	5      1    flags: bit0 = GID valid (RoCE / routed IB); other bits 0
//	6      2    LID (InfiniBand; 0 on RoCE)
//	8      4    QP number (24 bits used)
//	12     4    initial PSN (24 bits used)
//	16     16   GID (zero unless flags bit0)
//	32     1    active MTU (ibv_mtu: 1=256 ... 5=4096)
//	33     7    reserved, zero
//
// A QPInfo with another magic or version, non-zero reserved bytes or flags,
// a QPN or PSN above 24 bits, or an MTU outside 1..5 is refused
// (kverr.InvalidParams) and the handshake fails.
//
// # Completions and cancellation
//
// One goroutine per Conn polls the completion queue and hands each
// completion to the waiting call by work-request id. The send queue depth
// bounds calls in flight per Conn. A work request cannot be withdrawn once
// posted: when a call's ctx ends first, the Conn moves its QP to the error
// state (flushing every outstanding request), waits for the flush completion
// so the NIC no longer touches local, and returns the ctx error; the Conn is
// unusable afterwards.
//
// # What was exercised on the build machine (2026-11-29)
//
// libibverbs-dev 44.0-2 installed from Debian; `go vet -tags rdma ./rdma/`
// compiles the cgo code against it. There is no RDMA device: no
// /sys/class/infiniband, and soft-RoCE could not be loaded (`modprobe
// rdma_rxe`: "Module rdma_rxe not found in directory /lib/modules/6.18.44-fc-v657";
// `rdma link add rxe0 type rxe netdev lo`: "Failed to open NETLINK_RDMA
// socket"). So with -tags rdma, DeviceNames returns none and the device tests
// skip with that reason; the verbs data path (QP state changes, posting,
// polling) has NOT been run here. The side-channel format, handshake over
// real TCP, the stub and the tag-independent validation are tested.
//
// 2026-12-02: internal/transfer's RDMA transport adapts this package (the
// appliance registers its segments at mount and announces them; clients
// read and write one-sided). Its logic runs here over a fake fabric; the
// two-engine tests through real verbs (internal/transfer rdma_on_test.go,
// TestTransportContract/rdma, client TestPutGetOverEveryTransport/rdma)
// skip on this machine, printing the reason, and run unchanged where a
// device exists. Listener.Accept now resets a deadline a cancelled Accept
// left and bounds each handshake by HandshakeTimeout, so one silent peer
// cannot hold an accept loop.
package rdma
