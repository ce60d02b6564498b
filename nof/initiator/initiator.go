package initiator

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/sockpoll"
)

// Config describes the controller to connect to. Zero values mean the
// defaults in brackets.
type Config struct {
	SubNQN       string   // subsystem NQN (required; nvme.DiscoveryNQN for discovery)
	HostNQN      string   // our host NQN (required)
	HostID       [16]byte // [random]
	IOQueues     int      // I/O queues (connections) [1]
	QueueDepth   int      // entries per I/O queue [128]
	AdminDepth   int      // admin queue entries [32]
	HeaderDigest bool
	DataDigest   bool
	// PollSpin, when positive, makes each queue's reader poll an empty
	// socket this long before it sleeps (nof/sockpoll): lower latency and fewer
	// wake-ups for the CPU spent spinning, as a polling driver such as
	// spdk_nvme_perf trades [0: sleep at once].
	PollSpin time.Duration
	// KeepAlive is the KATO asked for; Keep Alive commands are sent every
	// KeepAlive/2. Negative disables keep-alive [10s].
	KeepAlive time.Duration
	// Dial opens the TCP connections [net.Dialer.DialContext].
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DHCHAPSecret is our host secret for in-band authentication
	// (DH-HMAC-CHAP, see nof/auth): used on every queue whose Connect
	// response asks for authentication (ATR). Without it such a controller
	// is refused with kverr.Unauthorized.
	DHCHAPSecret *auth.Secret
	// DHCHAPCtrlSecret, with DHCHAPSecret, also authenticates the
	// controller (bidirectional): a controller that cannot prove it holds
	// this secret is refused, and so is one that does not ask us to
	// authenticate at all.
	DHCHAPCtrlSecret *auth.Secret
	// DHGroups are the DH groups offered, in preference order
	// [auth.DefaultGroups: ffdhe2048, NULL].
	DHGroups []uint8
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.SubNQN == "" || len(c.SubNQN) > 223 {
		return kverr.New(kverr.InvalidParams, c.SubNQN, "SubNQN must be 1..223 bytes")
	}
	if c.HostNQN == "" || len(c.HostNQN) > 223 {
		return kverr.New(kverr.InvalidParams, c.HostNQN, "HostNQN must be 1..223 bytes")
	}
	if c.DHCHAPCtrlSecret != nil && c.DHCHAPSecret == nil {
		return kverr.New(kverr.InvalidParams, "", "a DH-HMAC-CHAP controller secret needs a host secret")
	}
	for _, g := range c.DHGroups {
		if !auth.SupportedGroup(g) {
			return kverr.New(kverr.InvalidParams, "", "DH group %d not supported (0 NULL, 1 ffdhe2048)", g)
		}
	}
	if c.IOQueues < 0 || c.IOQueues > 1024 {
		return kverr.New(kverr.InvalidParams, "", "IOQueues %d not in 0..1024", c.IOQueues)
	}
	if c.QueueDepth < 0 || c.QueueDepth > 1024 || c.AdminDepth < 0 || c.AdminDepth > 1024 || c.QueueDepth == 1 || c.AdminDepth == 1 {
		return kverr.New(kverr.InvalidParams, "", "queue depths must be 2..1024")
	}
	return nil
}

func (c *Config) defaults() {
	if c.IOQueues == 0 && c.SubNQN != nvme.DiscoveryNQN {
		c.IOQueues = 1
	}
	if c.SubNQN == nvme.DiscoveryNQN {
		c.IOQueues = 0
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = 128
	}
	if c.AdminDepth == 0 {
		c.AdminDepth = 32
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 10 * time.Second
	}
	if c.HostID == ([16]byte{}) {
		rand.Read(c.HostID[:])
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
}

// Namespace is what Identify Namespace told us about one namespace.
type Namespace struct {
	NSID      uint32
	Blocks    uint64
	BlockSize int
	NGUID     [16]byte
}

// Size is the namespace size in bytes.
func (n Namespace) Size() int64 { return int64(n.Blocks) * int64(n.BlockSize) }

// Controller is a connected NVMe/TCP controller: one admin queue and
// Config.IOQueues I/O queues. Safe for concurrent use.
type Controller struct {
	cfg  Config
	addr string
	rr   atomic.Uint32

	mu          sync.RWMutex // guards the session fields below
	admin       *queue
	io          []*queue
	cntlid      uint16
	ident       nvme.IdentifyController
	ns          map[uint32]Namespace
	maxTransfer int
	icd         int // in-capsule data bytes on I/O queues
	kaStop      context.CancelFunc
	kaDone      chan struct{}
	closed      bool
}

// Dial connects to the controller at addr (host:port): admin queue, enable,
// identify, I/O queues, keep-alive.
func Dial(ctx context.Context, addr string, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	c := &Controller{cfg: cfg, addr: addr}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// CNTLID returns the controller ID the target assigned.
func (c *Controller) CNTLID() uint16 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cntlid
}

// IOQueues returns how many I/O queues are connected (Config.IOQueues,
// or fewer when the target granted fewer).
func (c *Controller) IOQueues() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.io)
}

// Identify returns the Identify Controller data.
func (c *Controller) Identify() nvme.IdentifyController {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ident
}

// Namespaces returns the active namespaces, by NSID.
func (c *Controller) Namespaces() []Namespace {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Namespace, 0, len(c.ns))
	for _, n := range c.ns {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NSID < out[j].NSID })
	return out
}

// openQueue dials and negotiates one connection and connects it as qid.
func (c *Controller) openQueue(ctx context.Context, qid uint16, depth int, cntlid uint16) (*queue, uint16, error) {
	nc, err := c.cfg.Dial(ctx, "tcp", c.addr)
	if err != nil {
		return nil, 0, kverr.New(kverr.TransferFail, c.addr, "dial: %v", err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	q := newQueue(qid, nc, depth)
	fail := func(err error) (*queue, uint16, error) {
		nc.Close()
		return nil, 0, err
	}
	// ICReq/ICResp, bounded by ctx.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	var dg uint8
	if c.cfg.HeaderDigest {
		dg |= pdu.DigestHeader
	}
	if c.cfg.DataDigest {
		dg |= pdu.DigestData
	}
	if err := q.w.Send(&pdu.ICReq{DGST: dg}); err != nil {
		stop()
		return fail(kverr.New(kverr.TransferFail, c.addr, "send ICReq: %v", err))
	}
	q.r = pdu.NewReader(sockpoll.NewReader(nc, c.cfg.PollSpin), pdu.ReaderConfig{Side: pdu.HostSide, MaxC2HData: 16 << 20, BufferSize: 64 << 10})
	f, err := q.r.Next()
	if !stop() {
		return fail(ctx.Err())
	}
	if err != nil {
		return fail(kverr.New(kverr.TransferFail, c.addr, "ICResp: %v", err))
	}
	if f.Type != pdu.TypeICResp {
		tr := f.TermReq()
		return fail(kverr.New(kverr.TransferFail, c.addr, "controller refused ICReq (FES %d, FEI %d)", tr.FES, tr.FEI))
	}
	ic := f.ICResp()
	if ic.DGST != dg || ic.MAXH2CDATA < pdu.MinMaxH2CData || ic.MAXH2CDATA%4 != 0 {
		return fail(kverr.New(kverr.TransferFail, c.addr, "bad ICResp: digests 0x%x (asked 0x%x), MAXH2CDATA %d", ic.DGST, dg, ic.MAXH2CDATA))
	}
	q.maxH2CData = int(ic.MAXH2CDATA)
	o := pdu.Options{HDGST: c.cfg.HeaderDigest, DDGST: c.cfg.DataDigest}
	q.r.SetNegotiated(o)
	o.PDA = ic.CPDA
	q.w.SetOptions(o)
	go q.receive()

	cd := nvme.ConnectData{HostID: c.cfg.HostID, CNTLID: cntlid, SubNQN: c.cfg.SubNQN, HostNQN: c.cfg.HostNQN}
	kato := uint32(0)
	if qid == 0 && c.cfg.KeepAlive > 0 {
		kato = uint32(c.cfg.KeepAlive / time.Millisecond)
	}
	cmd := pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: nvme.ConnectDataLen, Type: pdu.SGLInCapsule}, CDW10: uint32(qid) << 16, CDW11: uint32(depth - 1), CDW12: kato}
	cpl, err := q.submit(ctx, &cmd, cd.Marshal(), nil, nil)
	if err == nil {
		err = statusErr(cpl)
	}
	if err == nil {
		err = c.authenticate(ctx, q, cpl.DW0&nvme.ConnectATR != 0)
	}
	if err != nil {
		q.fail(err)
		<-q.recvDone
		return nil, 0, err
	}
	return q, uint16(cpl.DW0), nil
}

// authenticate runs DH-HMAC-CHAP on a just connected queue when the
// controller asked for it (atr).
func (c *Controller) authenticate(ctx context.Context, q *queue, atr bool) error {
	if !atr {
		if c.cfg.DHCHAPCtrlSecret != nil {
			return kverr.New(kverr.Unauthorized, c.addr, "controller does not authenticate (bidirectional authentication configured)")
		}
		return nil
	}
	if c.cfg.DHCHAPSecret == nil {
		return kverr.New(kverr.Unauthorized, c.addr, "controller requires in-band authentication; no DH-HMAC-CHAP secret configured")
	}
	cdw10 := uint32(auth.SECP)<<24 | uint32(auth.SPSP1)<<16 | uint32(auth.SPSP0)<<8
	send := func(b []byte) error {
		cmd := pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, NSID: uint32(nvme.FabricsAuthSend),
			SGL: pdu.SGL{Len: uint32(len(b)), Type: pdu.SGLInCapsule}, CDW10: cdw10, CDW11: uint32(len(b))}
		cpl, err := q.submit(ctx, &cmd, b, nil, nil)
		if err == nil {
			err = statusErr(cpl)
		}
		return err
	}
	recv := func() ([]byte, error) {
		buf := make([]byte, authRecvLen)
		_, err := c.adminCmd(ctx, q, pdu.Command{Opcode: nvme.OpcodeFabrics, NSID: uint32(nvme.FabricsAuthRecv),
			CDW10: cdw10, CDW11: authRecvLen}, buf)
		return buf, err
	}
	h := &auth.Host{HostSecret: c.cfg.DHCHAPSecret, CtrlSecret: c.cfg.DHCHAPCtrlSecret, HostNQN: c.cfg.HostNQN,
		SubNQN: c.cfg.SubNQN, Groups: c.cfg.DHGroups, TID: q.qid}
	if err := h.Run(send, recv); err != nil {
		return fmt.Errorf("%w: %w", kverr.New(kverr.Unauthorized, c.addr, "queue %d: in-band authentication failed", q.qid), err)
	}
	return nil
}

// authRecvLen is the allocation length of Authentication Receive: the
// largest message we accept (a Challenge with an ffdhe2048 value is 304
// bytes; room for groups up to ffdhe8192).
const authRecvLen = 2048

// adminCmd runs an admin or Fabrics command, reading into out if given.
func (c *Controller) adminCmd(ctx context.Context, q *queue, cmd pdu.Command, out []byte) (pdu.Completion, error) {
	cmd.Flags = 0x40
	cmd.SGL = pdu.SGL{Len: uint32(len(out)), Type: pdu.SGLTransport}
	cpl, err := q.submit(ctx, &cmd, nil, nil, out)
	if err != nil {
		return cpl, err
	}
	return cpl, statusErr(cpl)
}

func propGet(ofst uint32, size8 bool) pdu.Command {
	attr := uint32(0)
	if size8 {
		attr = 1
	}
	return pdu.Command{Opcode: nvme.OpcodeFabrics, NSID: uint32(nvme.FabricsPropGet), CDW10: attr, CDW11: ofst}
}

func propSet(ofst, v uint32) pdu.Command {
	return pdu.Command{Opcode: nvme.OpcodeFabrics, NSID: uint32(nvme.FabricsPropSet), CDW11: ofst, CDW12: v}
}

// connect builds a session; on failure everything opened is closed.
func (c *Controller) connect(ctx context.Context) (err error) {
	admin, cntlid, err := c.openQueue(ctx, 0, c.cfg.AdminDepth, 0xFFFF)
	if err != nil {
		return err
	}
	var ios []*queue
	defer func() {
		if err != nil {
			for _, q := range append(ios, admin) {
				q.fail(net.ErrClosed)
			}
		}
	}()
	cpl, err := c.adminCmd(ctx, admin, propGet(nvme.PropCAP, true), nil)
	if err != nil {
		return err
	}
	capv := uint64(cpl.DW0) | uint64(cpl.DW1)<<32
	if _, err = c.adminCmd(ctx, admin, propSet(nvme.PropCC, 0x00460001), nil); err != nil {
		return err
	}
	timeout := time.Duration((capv>>24)&0xFF)*500*time.Millisecond + time.Second
	deadline := time.Now().Add(timeout)
	for {
		cpl, err = c.adminCmd(ctx, admin, propGet(nvme.PropCSTS, false), nil)
		if err != nil {
			return err
		}
		if cpl.DW0&1 != 0 {
			break
		}
		if cpl.DW0&2 != 0 || time.Now().After(deadline) {
			return kverr.New(kverr.TransferFail, c.addr, "controller did not become ready (CSTS 0x%x)", cpl.DW0)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	idBuf := make([]byte, nvme.IdentifyLen)
	if _, err = c.adminCmd(ctx, admin, pdu.Command{Opcode: nvme.AdminIdentify, CDW10: 1}, idBuf); err != nil {
		return err
	}
	ident, _ := nvme.ParseIdentifyController(idBuf)
	maxTransfer := 1 << 20
	if ident.MDTS != 0 && ident.MDTS < 20 {
		maxTransfer = min(maxTransfer, 4096<<ident.MDTS)
	}
	icd := max(int(ident.IOCCSZ)*16-64, 0)
	nsMap := map[uint32]Namespace{}
	nio := c.cfg.IOQueues
	if ident.CtrlType != nvme.CtrlTypeDiscovery && nio > 0 {
		want := uint32(nio - 1)
		cpl, err = c.adminCmd(ctx, admin, pdu.Command{Opcode: nvme.AdminSetFeatures, CDW10: uint32(nvme.FeatNumQueues), CDW11: want<<16 | want}, nil)
		if err != nil {
			return err
		}
		granted := int(min(cpl.DW0&0xFFFF, cpl.DW0>>16)) + 1
		nio = min(nio, granted)
		list := make([]byte, nvme.IdentifyLen)
		if _, err = c.adminCmd(ctx, admin, pdu.Command{Opcode: nvme.AdminIdentify, CDW10: 2}, list); err != nil {
			return err
		}
		for _, id := range nvme.ParseActiveNSList(list) {
			b := make([]byte, nvme.IdentifyLen)
			if _, err = c.adminCmd(ctx, admin, pdu.Command{Opcode: nvme.AdminIdentify, NSID: id, CDW10: 0}, b); err != nil {
				return err
			}
			in, _ := nvme.ParseIdentifyNamespace(b)
			if in.NSZE == 0 || in.LBADS < 9 || in.LBADS > 16 {
				continue
			}
			nsMap[id] = Namespace{NSID: id, Blocks: in.NSZE, BlockSize: in.BlockSize(), NGUID: in.NGUID}
		}
		for i := 1; i <= nio; i++ {
			q, _, qerr := c.openQueue(ctx, uint16(i), c.cfg.QueueDepth, cntlid)
			if qerr != nil {
				err = qerr
				return err
			}
			ios = append(ios, q)
		}
	}
	kctx, kstop := context.WithCancel(context.Background())
	c.mu.Lock()
	c.admin, c.io, c.cntlid, c.ident, c.ns = admin, ios, cntlid, ident, nsMap
	c.maxTransfer, c.icd = maxTransfer, icd
	c.kaStop, c.kaDone = kstop, make(chan struct{})
	c.closed = false
	kaDone := c.kaDone
	c.mu.Unlock()
	go c.keepAlive(kctx, admin, kaDone)
	return nil
}

// keepAlive sends Keep Alive every KATO/2; a failure kills the session so
// callers see TransferFail and may Reconnect.
func (c *Controller) keepAlive(ctx context.Context, admin *queue, done chan struct{}) {
	defer close(done)
	if c.cfg.KeepAlive <= 0 {
		return
	}
	t := time.NewTicker(c.cfg.KeepAlive / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-admin.recvDone:
			return
		case <-t.C:
		}
		kctx, cancel := context.WithTimeout(ctx, c.cfg.KeepAlive)
		_, err := c.adminCmd(kctx, admin, pdu.Command{Opcode: nvme.AdminKeepAlive}, nil)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.mu.RLock()
			qs := append([]*queue{admin}, c.io...)
			c.mu.RUnlock()
			for _, q := range qs {
				q.fail(fmt.Errorf("keep-alive failed: %w", err))
			}
			return
		}
	}
}

// session returns the current queues or an error when closed.
func (c *Controller) session() (*queue, []*queue, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed || c.admin == nil {
		return nil, nil, kverr.New(kverr.UnavailableInCurrentStatus, c.addr, "controller closed")
	}
	return c.admin, c.io, nil
}

// AdminCommand runs a raw admin command (CID, flags and SGL are filled in);
// out receives its data. It returns the completion's DW0.
func (c *Controller) AdminCommand(ctx context.Context, cmd pdu.Command, out []byte) (uint32, error) {
	admin, _, err := c.session()
	if err != nil {
		return 0, err
	}
	cpl, err := c.adminCmd(ctx, admin, cmd, out)
	return cpl.DW0, err
}

// teardown stops keep-alive and closes every queue; shutdown first asks the
// controller for a normal shutdown (CC.SHN) and waits briefly for it.
func (c *Controller) teardown(ctx context.Context, shutdown bool) {
	c.mu.Lock()
	admin, ios, stop, done := c.admin, c.io, c.kaStop, c.kaDone
	c.admin, c.io, c.closed = nil, nil, true
	c.mu.Unlock()
	if admin == nil {
		return
	}
	stop()
	<-done
	if shutdown {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := c.adminCmd(sctx, admin, propSet(nvme.PropCC, 0x00460001|1<<14), nil); err == nil {
			for sctx.Err() == nil {
				cpl, err := c.adminCmd(sctx, admin, propGet(nvme.PropCSTS, false), nil)
				if err != nil || (cpl.DW0>>2)&3 == 2 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		cancel()
	}
	for _, q := range append(ios, admin) {
		q.fail(net.ErrClosed)
	}
	for _, q := range append(ios, admin) {
		<-q.recvDone
	}
}

// Close shuts the controller down normally and closes every connection.
func (c *Controller) Close() error {
	c.teardown(context.Background(), true)
	return nil
}

// Reconnect drops the current connections (without shutdown) and connects
// again with the same configuration.
func (c *Controller) Reconnect(ctx context.Context) error {
	c.teardown(ctx, false)
	return c.connect(ctx)
}
