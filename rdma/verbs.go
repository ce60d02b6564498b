//go:build rdma

package rdma

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

static int kv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

static int kv_port_is_ethernet(struct ibv_port_attr *a) { return a->link_layer == IBV_LINK_LAYER_ETHERNET; }

static struct ibv_qp *kv_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 1;
	a.cap.max_send_wr = depth;
	a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &a);
}

static int kv_qp_init(struct ibv_qp *qp, uint8_t port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int kv_qp_rtr(struct ibv_qp *qp, uint8_t port, uint32_t rqpn, uint32_t rpsn, uint16_t dlid,
                     const uint8_t *gid, int use_gid, int gid_index, int mtu, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = rqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = rd_atom;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = port;
	if (use_gid) {
		a.ah_attr.is_global = 1;
		memcpy(&a.ah_attr.grh.dgid, gid, 16);
		a.ah_attr.grh.sgid_index = gid_index;
		a.ah_attr.grh.hop_limit = 1;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int kv_qp_rts(struct ibv_qp *qp, uint32_t psn, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = rd_atom;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int kv_qp_err(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int kv_post(struct ibv_qp *qp, int write, uint64_t laddr, uint32_t len, uint32_t lkey,
                   uint64_t raddr, uint32_t rkey, uint64_t wr_id) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	sge.addr = laddr;
	sge.length = len;
	sge.lkey = lkey;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int kv_poll(struct ibv_cq *cq, uint64_t *wr_id, int *status) {
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	if (n > 0) {
		*wr_id = wc.wr_id;
		*status = wc.status;
	}
	return n;
}

static struct ibv_device *kv_dev_at(struct ibv_device **l, int i) { return l[i]; }
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvtier/kvtier/kverr"
)

// DeviceNames lists the RDMA devices libibverbs sees.
func DeviceNames() ([]string, error) {
	var n C.int
	list, errno := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, errNoDevice(fmt.Sprintf("no RDMA device: ibv_get_device_list returned NULL (%v)", errno))
	}
	defer C.ibv_free_device_list(list)
	names := make([]string, 0, int(n))
	for i := 0; i < int(n); i++ {
		names = append(names, C.GoString(C.ibv_get_device_name(C.kv_dev_at(list, C.int(i)))))
	}
	return names, nil
}

// Available reports whether at least one RDMA device exists.
func Available() bool {
	n, err := DeviceNames()
	return err == nil && len(n) > 0
}

// Reason says why Available is false ("" when it is true).
func Reason() string {
	n, err := DeviceNames()
	switch {
	case err != nil:
		return err.Error()
	case len(n) == 0:
		return "no RDMA device: ibv_get_device_list returned none"
	}
	return ""
}

// Device is an opened RDMA device with one protection domain.
type Device struct {
	cfg    Config
	name   string
	ctx    *C.struct_ibv_context
	pd     *C.struct_ibv_pd
	lid    uint16
	mtu    uint8
	gid    [16]byte
	useGID bool
	rdAtom int

	mu sync.Mutex
	// guarded by mu:
	mrs    []*MR
	closed bool
}

// OpenDevice opens the named device ("" = the first one) and allocates a
// protection domain.
func OpenDevice(name string, cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var n C.int
	list := C.ibv_get_device_list(&n)
	if list == nil || n == 0 {
		if list != nil {
			C.ibv_free_device_list(list)
		}
		return nil, errNoDevice("no RDMA device: ibv_get_device_list returned none")
	}
	defer C.ibv_free_device_list(list)
	var dev *C.struct_ibv_device
	for i := 0; i < int(n); i++ {
		d := C.kv_dev_at(list, C.int(i))
		if name == "" || C.GoString(C.ibv_get_device_name(d)) == name {
			dev = d
			break
		}
	}
	if dev == nil {
		return nil, errNoDevice(fmt.Sprintf("no RDMA device named %q", name))
	}
	d := &Device{cfg: cfg, name: C.GoString(C.ibv_get_device_name(dev))}
	if d.ctx = C.ibv_open_device(dev); d.ctx == nil {
		return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_open_device %s failed", d.name)
	}
	if d.pd = C.ibv_alloc_pd(d.ctx); d.pd == nil {
		C.ibv_close_device(d.ctx)
		return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_alloc_pd on %s failed", d.name)
	}
	var pa C.struct_ibv_port_attr
	if rc := C.kv_query_port(d.ctx, C.uint8_t(cfg.Port), &pa); rc != 0 {
		d.Close()
		return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_query_port %s/%d: %d", d.name, cfg.Port, int(rc))
	}
	d.lid, d.mtu = uint16(pa.lid), uint8(pa.active_mtu)
	if C.kv_port_is_ethernet(&pa) != 0 {
		var g C.union_ibv_gid
		if rc := C.ibv_query_gid(d.ctx, C.uint8_t(cfg.Port), C.int(cfg.GIDIndex), &g); rc != 0 {
			d.Close()
			return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_query_gid %s index %d: %d", d.name, cfg.GIDIndex, int(rc))
		}
		copy(d.gid[:], C.GoBytes(unsafe.Pointer(&g), 16))
		d.useGID = true
	}
	var da C.struct_ibv_device_attr
	d.rdAtom = 1
	if C.ibv_query_device(d.ctx, &da) == 0 && da.max_qp_rd_atom > 0 {
		d.rdAtom = min(int(da.max_qp_rd_atom), 16)
	}
	return d, nil
}

// Close deregisters remaining memory regions and releases the device.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	mrs := d.mrs
	d.mrs = nil
	d.mu.Unlock()
	for _, m := range mrs {
		m.release()
	}
	if d.pd != nil {
		C.ibv_dealloc_pd(d.pd)
	}
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
	}
	return nil
}

// MR is a registered memory region. Addr and RKey are what a peer needs to
// address it; LKey is used locally.
type MR struct {
	Addr uint64
	RKey uint32
	LKey uint32
	size uint64
	mr   *C.struct_ibv_mr
	pin  runtime.Pinner
	dev  *Device
	once sync.Once
}

// RegisterMemory registers buf for local use and remote READ/WRITE. buf stays
// pinned until the MR is closed.
func (d *Device) RegisterMemory(buf []byte) (*MR, error) {
	return d.register(buf, C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_READ|C.IBV_ACCESS_REMOTE_WRITE)
}

// RegisterMemoryReadOnly registers buf for remote READ only (a peer's
// WRITE to it fails its queue pair): memory peers may read but must not
// change, such as a segment's free table.
func (d *Device) RegisterMemoryReadOnly(buf []byte) (*MR, error) {
	return d.register(buf, C.IBV_ACCESS_REMOTE_READ)
}

func (d *Device) register(buf []byte, access C.int) (*MR, error) {
	if len(buf) == 0 {
		return nil, kverr.New(kverr.InvalidParams, "", "rdma: empty buffer")
	}
	m := &MR{dev: d, size: uint64(len(buf))}
	m.pin.Pin(&buf[0])
	p := unsafe.Pointer(&buf[0])
	m.mr = C.ibv_reg_mr(d.pd, p, C.size_t(len(buf)), access)
	if m.mr == nil {
		m.pin.Unpin()
		return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_reg_mr of %d bytes failed", len(buf))
	}
	m.Addr, m.RKey, m.LKey = uint64(uintptr(p)), uint32(m.mr.rkey), uint32(m.mr.lkey)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		m.release()
		return nil, ErrUnavailable
	}
	d.mrs = append(d.mrs, m)
	d.mu.Unlock()
	return m, nil
}

// Close deregisters the region and unpins its memory.
func (m *MR) Close() error {
	d := m.dev
	d.mu.Lock()
	for i, x := range d.mrs {
		if x == m {
			d.mrs = append(d.mrs[:i], d.mrs[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
	m.release()
	return nil
}

func (m *MR) release() {
	m.once.Do(func() {
		C.ibv_dereg_mr(m.mr)
		m.pin.Unpin()
	})
}

// lkey returns the lkey of a registered region covering b.
func (d *Device) lkey(b []byte) (uint32, error) {
	if len(b) == 0 {
		return 0, kverr.New(kverr.InvalidParams, "", "rdma: empty local buffer")
	}
	lo := uint64(uintptr(unsafe.Pointer(&b[0])))
	hi := lo + uint64(len(b))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.mrs {
		if lo >= m.Addr && hi <= m.Addr+m.size {
			return m.LKey, nil
		}
	}
	return 0, kverr.New(kverr.InvalidParams, "", "rdma: local buffer %#x+%d is not in a registered region", lo, len(b))
}

// Listener accepts RC connections over a TCP side channel.
type Listener struct {
	dev *Device
	ln  net.Listener
}

// Listen listens for side-channel connections on a TCP address.
func (d *Device) Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, kverr.New(kverr.TransferFail, "", "rdma: listen %s: %v", addr, err)
	}
	return &Listener{dev: d, ln: ln}, nil
}

// Addr is the side channel's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops accepting.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits for one peer and connects a QP to it.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	// A deadline left by an earlier cancelled Accept must not fail this one.
	_ = l.ln.(*net.TCPListener).SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { l.ln.(*net.TCPListener).SetDeadline(time.Unix(1, 0)) })
	defer stop()
	tc, err := l.ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, kverr.New(kverr.TransferFail, "", "rdma: accept: %v", err)
	}
	defer tc.Close()
	// A peer that connects and goes silent holds the caller's accept loop
	// no longer than this.
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	return l.dev.handshake(hctx, tc)
}

// HandshakeTimeout bounds one side-channel handshake in Accept.
const HandshakeTimeout = 10 * time.Second

// Dial connects a QP to the peer listening at addr.
func (d *Device) Dial(ctx context.Context, addr string) (*Conn, error) {
	var dl net.Dialer
	tc, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, kverr.New(kverr.TransferFail, "", "rdma: dial %s: %v", addr, err)
	}
	defer tc.Close()
	return d.handshake(ctx, tc)
}

// Conn is an RC queue pair connected to one peer.
type Conn struct {
	dev    *Device
	cq     *C.struct_ibv_cq
	qp     *C.struct_ibv_qp
	slots  chan struct{}
	nextID atomic.Uint64
	done   chan struct{} // closed when the poller exits

	mu sync.Mutex
	// guarded by mu:
	pending map[uint64]chan int
	broken  error
	closing bool
}

func (d *Device) handshake(ctx context.Context, tc net.Conn) (*Conn, error) {
	depth := d.cfg.QueueDepth
	c := &Conn{dev: d, slots: make(chan struct{}, depth), done: make(chan struct{}), pending: map[uint64]chan int{}}
	if c.cq = C.ibv_create_cq(d.ctx, C.int(depth), nil, nil, 0); c.cq == nil {
		return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_create_cq failed")
	}
	if c.qp = C.kv_create_qp(d.pd, c.cq, C.int(depth)); c.qp == nil {
		C.ibv_destroy_cq(c.cq)
		return nil, kverr.New(kverr.TransferFail, "", "rdma: ibv_create_qp failed")
	}
	destroy := func() {
		C.ibv_destroy_qp(c.qp)
		C.ibv_destroy_cq(c.cq)
	}
	if rc := C.kv_qp_init(c.qp, C.uint8_t(d.cfg.Port)); rc != 0 {
		destroy()
		return nil, kverr.New(kverr.TransferFail, "", "rdma: QP to INIT: %d", int(rc))
	}
	var r [4]byte
	rand.Read(r[:])
	psn := binary.BigEndian.Uint32(r[:]) & 0xffffff
	local := QPInfo{LID: d.lid, QPN: uint32(c.qp.qp_num), PSN: psn, GIDValid: d.useGID, MTU: d.mtu}
	if d.useGID {
		local.GID = d.gid
	}
	_, err := exchange(ctx, tc, local, func(peer QPInfo) error {
		mtu := min(local.MTU, peer.MTU)
		gid := peer.GID
		useGID := 0
		if peer.GIDValid {
			useGID = 1
		}
		if rc := C.kv_qp_rtr(c.qp, C.uint8_t(d.cfg.Port), C.uint32_t(peer.QPN), C.uint32_t(peer.PSN), C.uint16_t(peer.LID),
			(*C.uint8_t)(unsafe.Pointer(&gid[0])), C.int(useGID), C.int(d.cfg.GIDIndex), C.int(mtu), C.int(d.rdAtom)); rc != 0 {
			return kverr.New(kverr.TransferFail, "", "rdma: QP to RTR: %d", int(rc))
		}
		if rc := C.kv_qp_rts(c.qp, C.uint32_t(psn), C.int(d.rdAtom)); rc != 0 {
			return kverr.New(kverr.TransferFail, "", "rdma: QP to RTS: %d", int(rc))
		}
		return nil
	})
	if err != nil {
		destroy()
		return nil, err
	}
	go c.poll()
	return c, nil
}

// poll hands completions to their waiters until the Conn is closing and
// nothing is outstanding.
func (c *Conn) poll() {
	defer close(c.done)
	idle := 0
	for {
		var id C.uint64_t
		var st C.int
		n := C.kv_poll(c.cq, &id, &st)
		if n > 0 {
			idle = 0
			c.mu.Lock()
			ch := c.pending[uint64(id)]
			delete(c.pending, uint64(id))
			c.mu.Unlock()
			if ch != nil {
				ch <- int(st)
			}
			continue
		}
		c.mu.Lock()
		stop := c.closing && len(c.pending) == 0
		if n < 0 && c.broken == nil {
			c.broken = kverr.New(kverr.TransferFail, "", "rdma: ibv_poll_cq failed")
		}
		c.mu.Unlock()
		if stop {
			return
		}
		if idle++; idle > 1000 {
			time.Sleep(50 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// Read copies len(local) bytes from the peer's memory at remoteAddr (rkey)
// into local with one RDMA READ.
func (c *Conn) Read(ctx context.Context, local []byte, remoteAddr uint64, rkey uint32) error {
	return c.op(ctx, false, local, remoteAddr, rkey)
}

// Write copies local into the peer's memory at remoteAddr (rkey) with one
// RDMA WRITE.
func (c *Conn) Write(ctx context.Context, local []byte, remoteAddr uint64, rkey uint32) error {
	return c.op(ctx, true, local, remoteAddr, rkey)
}

func (c *Conn) op(ctx context.Context, write bool, local []byte, raddr uint64, rkey uint32) error {
	if uint64(len(local)) > 1<<31 {
		return kverr.New(kverr.InvalidParams, "", "rdma: %d bytes in one work request", len(local))
	}
	lkey, err := c.dev.lkey(local)
	if err != nil {
		return err
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return kverr.New(kverr.TransferFail, "", "rdma: %v", ctx.Err())
	}
	defer func() { <-c.slots }()
	id := c.nextID.Add(1)
	ch := make(chan int, 1)
	c.mu.Lock()
	if c.broken != nil || c.closing {
		err := c.broken
		c.mu.Unlock()
		if err == nil {
			err = ErrUnavailable
		}
		return err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	w := 0
	if write {
		w = 1
	}
	laddr := uint64(uintptr(unsafe.Pointer(&local[0])))
	if rc := C.kv_post(c.qp, C.int(w), C.uint64_t(laddr), C.uint32_t(len(local)), C.uint32_t(lkey),
		C.uint64_t(raddr), C.uint32_t(rkey), C.uint64_t(id)); rc != 0 {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return kverr.New(kverr.TransferFail, "", "rdma: ibv_post_send: %d", int(rc))
	}
	select {
	case st := <-ch:
		runtime.KeepAlive(local)
		if st != C.IBV_WC_SUCCESS {
			return kverr.New(kverr.TransferFail, "", "rdma: completion status %s", C.GoString(C.ibv_wc_status_str(uint32(st))))
		}
		return nil
	case <-ctx.Done():
		// The request cannot be withdrawn: flush the QP and wait until the
		// NIC is done with local before returning.
		c.mu.Lock()
		if c.broken == nil {
			c.broken = kverr.New(kverr.TransferFail, "", "rdma: connection aborted by a cancelled request")
		}
		c.mu.Unlock()
		C.kv_qp_err(c.qp)
		<-ch
		runtime.KeepAlive(local)
		return kverr.New(kverr.TransferFail, "", "rdma: %v", ctx.Err())
	}
}

// Close flushes outstanding requests, waits for their completions and
// destroys the QP.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closing = true
	c.mu.Unlock()
	C.kv_qp_err(c.qp)
	<-c.done
	C.ibv_destroy_qp(c.qp)
	C.ibv_destroy_cq(c.cq)
	return nil
}
