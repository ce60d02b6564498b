package target

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/sockpoll"
)

// r2tState is one outstanding R2T: the reader goroutine fills buf from
// H2CData PDUs and closes done when the whole window has arrived. If start
// is set, the reader first starts the command's device transfer with it
// (unless a digest failed) and leaves wait for the worker.
type r2tState struct {
	cccid     uint16
	buf       []byte
	received  int  // touched only by the reader goroutine
	badDigest bool // a data digest failed; read by the worker after done
	start     func(buf []byte) (wait func() error)
	wait      func() error // set by the reader before done closes
	done      chan struct{}
	// inline, if set, finishes the command on the reader goroutine once
	// the whole window has arrived (done is then nil; see inline.go).
	inline func()
}

// conn is one TCP connection = one NVMe queue pair.
type conn struct {
	t      *Target
	nc     net.Conn
	r      *pdu.Reader
	dr     *deadlineReader
	w      *pdu.Writer
	ctx    context.Context
	cancel context.CancelFunc
	remote string
	once   sync.Once

	// Set by the reader goroutine during Connect, before any worker starts.
	qid       uint16
	ctrl      *controller
	sqsize    uint16 // 0's based
	sqFlowOff bool
	icd       int // in-capsule data limit of this queue

	// In-band authentication, touched only by the reader goroutine: the
	// queue's transaction (nil when its subsystem has no secrets), whether
	// the queue may serve other commands, and the failure already counted.
	authc     *auth.Controller
	authed    bool
	authErred error

	sqhd     atomic.Uint32 // commands completed, for CQE SQHD (SPDK's convention)
	inflight sync.WaitGroup
	active   atomic.Int32 // I/O commands handed to workers and not yet done
	turn     *answerTurn  // answers of device-backed commands (see turn.go)

	// Touched only by the reader goroutine: per-namespace batches of
	// device transfers it started, and those holding unsubmitted ones
	// (submitted before the reader could wait for the network).
	batches map[*nsState]namespace.Batch
	queued  []namespace.Batch
	// pushPending: the reader queued answers (inline.go) that it still has
	// to write. Touched only by the reader goroutine.
	pushPending bool
	// flushScheduled: a worker will write the queued answers (sendSmall).
	flushScheduled atomic.Bool

	mu       sync.Mutex // guards r2ts and nextTTAG
	r2ts     map[uint16]*r2tState
	nextTTAG uint16
}

func (t *Target) newConn(nc net.Conn) *conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	ctx, cancel := context.WithCancel(t.ctx)
	c := &conn{t: t, nc: nc, ctx: ctx, cancel: cancel, remote: nc.RemoteAddr().String(), r2ts: map[uint16]*r2tState{}, turn: newAnswerTurn()}
	c.dr = &deadlineReader{c: c, nc: nc, idle: true}
	if t.cfg.PollSpin > 0 {
		c.dr.src = sockpoll.NewReader(nc, t.cfg.PollSpin)
	}
	c.r = pdu.NewReader(c.dr, pdu.ReaderConfig{Side: pdu.ControllerSide, MaxCapsuleData: max(8192, t.cfg.InCapsuleDataSize),
		MaxH2CData: t.cfg.MaxH2CData, BufferSize: 64 << 10})
	c.w = pdu.NewWriter(nc)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		nc.Close()
		cancel()
		return nil
	}
	t.conns[c] = true
	return c
}

// close tears the connection down from any goroutine.
func (c *conn) close() {
	c.once.Do(func() {
		c.cancel()
		c.w.Fail(net.ErrClosed)
		c.nc.Close()
	})
}

func (c *conn) serve() {
	defer c.finish()
	defer c.submitQueued() // before finish waits for the workers
	if err := c.handshake(); err != nil {
		c.fail(err)
		return
	}
	for {
		// Transfers started for commands that arrived back to back go to
		// the device together, once no further PDU is already here.
		if len(c.queued) > 0 && !c.r.NextBuffered() {
			c.submitQueued()
		}
		// Answers of inline commands go out together once no further
		// whole PDU is here, or when enough of them wait (inline.go).
		if c.pushPending && (!c.r.NextBuffered() || c.w.Pending() >= inlinePushBytes) {
			c.pushPending = false
			c.w.Push()
			if c.w.Pending() > c.pendingLimit() {
				c.w.WaitBelow(c.pendingLimit()) // a host that does not read its answers
			}
		}
		c.dr.idle = c.r.Buffered() == 0 // else part of the next PDU is here
		f, err := c.r.Next()
		if err != nil {
			c.fail(err)
			return
		}
		switch f.Type {
		case pdu.TypeCapsuleCmd:
			cmd := f.Command()
			var data []byte
			if f.DataLen > 0 {
				data = c.t.bufs.get(f.DataLen)
				if err := c.r.ReadData(data); err != nil {
					c.t.bufs.put(data)
					if !pdu.IsDataDigest(err) {
						c.fail(err)
						return
					}
					// Only this command is lost: the stream is still in step.
					c.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCTransientTranspt), 0, 0)
					continue
				}
			}
			c.dispatch(cmd, data)
		case pdu.TypeH2CData:
			if err := c.h2cData(f); err != nil {
				c.fail(err)
				return
			}
		case pdu.TypeH2CTermReq:
			tr := f.TermReq()
			c.t.cfg.Logger.Info("nvme-tcp host terminated connection", "remote", c.remote, "fes", tr.FES, "fei", tr.FEI)
			return
		}
	}
}

func (c *conn) handshake() error {
	// The deadline reader gives the ICReq HeaderTimeout (no controller yet).
	f, err := c.r.Next()
	if err != nil {
		return err
	}
	if f.Type != pdu.TypeICReq {
		return io.ErrUnexpectedEOF // H2CTermReq before ICReq: just close
	}
	req := f.ICReq()
	// Echo the requested digests; CPDA 0 (Linux hosts insist on it).
	resp := &pdu.ICResp{PFV: 0, CPDA: 0, DGST: req.DGST & (pdu.DigestHeader | pdu.DigestData), MAXH2CDATA: uint32(c.t.cfg.MaxH2CData)}
	if err := c.w.Send(resp); err != nil {
		return err
	}
	hd, dd := resp.DGST&pdu.DigestHeader != 0, resp.DGST&pdu.DigestData != 0
	c.r.SetNegotiated(pdu.Options{HDGST: hd, DDGST: dd, PDA: 0})
	c.w.SetOptions(pdu.Options{HDGST: hd, DDGST: dd, PDA: req.HPDA})
	return nil
}

// starter returns what starts device transfers of n from the reader
// goroutine: a batch submitted before the reader next waits for the
// network, or n itself. nil if n cannot start transfers.
func (c *conn) starter(n *nsState) namespace.Starter {
	bt, ok := n.ns.(namespace.Batcher)
	if !ok {
		st, _ := n.ns.(namespace.Starter)
		return st
	}
	b := c.batches[n]
	if b == nil {
		if c.batches == nil {
			c.batches = map[*nsState]namespace.Batch{}
		}
		b = bt.NewBatch()
		c.batches[n] = b
	}
	if !slices.Contains(c.queued, b) {
		c.queued = append(c.queued, b)
	}
	return b
}

// submitQueued hands every batched transfer to its device (reader
// goroutine only).
func (c *conn) submitQueued() {
	for _, b := range c.queued {
		b.Submit()
	}
	clear(c.queued)
	c.queued = c.queued[:0]
}

// fail ends the connection; a protocol error first gets a C2HTermReq.
func (c *conn) fail(err error) {
	c.submitQueued() // workers must not wait for them through the drain
	var pe *pdu.Error
	if !errors.As(err, &pe) {
		return // I/O error or EOF: nothing to tell the host
	}
	c.t.cfg.Logger.Warn("nvme-tcp fatal PDU error", "remote", c.remote, "err", pe)
	// Flush: another goroutine's flush may still be about to write the
	// TermReq, and CloseWrite must not overtake it.
	if c.w.Send(pdu.TermReqFor(pe, false)) != nil || c.w.Flush() != nil {
		return
	}
	// Half-close and drain so the TermReq is not lost to a reset caused by
	// unread bytes, then let finish close the socket.
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
		tc.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, io.LimitReader(tc, 64<<20))
	}
}

// finish runs when the reader goroutine exits.
func (c *conn) finish() {
	c.close()
	c.inflight.Wait()
	c.turn.close()
	t := c.t
	t.mu.Lock()
	delete(t.conns, c)
	t.transport.ReadCalls += c.dr.reads.Load()
	t.transport.WriteCalls += c.w.Rounds()
	t.mu.Unlock()
	if ctrl := c.ctrl; ctrl != nil {
		if c.qid == 0 {
			t.destroyController(ctrl, "admin queue closed")
		} else {
			ctrl.removeIOQueue(c)
		}
	}
}

// complete sends the CapsuleResp for cid. A *nvme.StatusError sets the
// status (and its DW0); any other error is an internal error.
func (c *conn) complete(cid uint16, err error, dw0, dw1 uint32) {
	cpl := c.completion(cid, err, dw0, dw1)
	c.sendSmall(&cpl)
}

// sendSmall sends small answers of worker goroutines so that answers
// completed together go out in one write: the message is queued, and the
// first worker to find no flush scheduled schedules one, lets the other
// runnable goroutines (workers readied by the same batch of device
// completions) queue theirs, then writes them all. A worker that finds a
// flush scheduled only queues: that flush clears the flag after it queued
// (it saw it set) and so writes its message too. The reader goroutine's
// own queued answers (inline.go) go out with the same writes.
func (c *conn) sendSmall(m pdu.Message) {
	if c.w.Queue(func(b []byte, o pdu.Options) ([]byte, error) { return m.AppendPDU(b, o), nil }) != nil {
		return
	}
	if !c.flushScheduled.CompareAndSwap(false, true) {
		return
	}
	runtime.Gosched()
	c.flushScheduled.Store(false)
	c.w.Send()
}

func (c *conn) completion(cid uint16, err error, dw0, dw1 uint32) pdu.CapsuleResp {
	var status uint16
	if err != nil {
		var se *nvme.StatusError
		if !errors.As(err, &se) {
			se = nvme.Errf(nvme.SCTGeneric, nvme.SCInternal)
		}
		status = se.Status()
		dw0 = se.DW0
	}
	// SQHD advances as commands complete: an entry whose command completed
	// has certainly been consumed, so the host never over-fills the SQ.
	n := c.sqhd.Add(1)
	sqhd := uint16(0xFFFF)
	if !c.sqFlowOff {
		sqhd = uint16(n % (uint32(c.sqsize) + 1))
	}
	return pdu.CapsuleResp{Cpl: pdu.Completion{DW0: dw0, DW1: dw1, SQHD: sqhd, SQID: c.qid, CID: cid, Status: status}}
}

// sendData sends data for cid as one C2HData and completes the command,
// folding the completion into the data PDU when allowed, else queueing the
// CapsuleResp together with the data (one write, no extra round of
// flushing before the host can complete the read).
func (c *conn) sendData(cid uint16, data []byte) {
	small := len(data) < 16<<10 // copied into the Writer; larger data is sent from data
	if c.sqFlowOff || c.t.cfg.C2HSuccess {
		c.sqhd.Add(1) // completed without a CQE
		m := &pdu.C2HData{CCCID: cid, Last: true, Success: true, Data: data}
		if small {
			c.sendSmall(m)
		} else {
			c.w.Send(m)
		}
		return
	}
	cpl := c.completion(cid, nil, 0, 0)
	if small {
		c.sendSmall(&c2hWithResp{data: pdu.C2HData{CCCID: cid, Last: true, Data: data}, resp: cpl})
		return
	}
	c.w.Send(&pdu.C2HData{CCCID: cid, Last: true, Data: data}, &cpl)
}

// c2hWithResp is a C2HData and its CapsuleResp encoded back to back.
type c2hWithResp struct {
	data pdu.C2HData
	resp pdu.CapsuleResp
}

func (m *c2hWithResp) PDUType() pdu.Type { return pdu.TypeC2HData }

func (m *c2hWithResp) AppendPDU(b []byte, o pdu.Options) []byte {
	return m.resp.AppendPDU(m.data.AppendPDU(b, o), o)
}

// dispatch routes one command. Admin and Fabrics commands run inline on
// the reader goroutine; I/O commands run concurrently.
func (c *conn) dispatch(sqe pdu.Command, data []byte) {
	if !c.authed && c.ctrl != nil && !(sqe.Opcode == nvme.OpcodeFabrics && authExempt(sqe.FabricsType())) {
		c.t.authRefused.Add(1)
		c.complete(sqe.CID, nvme.Errf(nvme.SCTSpecific, nvme.SCAuthRequired), 0, 0)
		c.t.bufs.put(data)
		return
	}
	// Inline commands use the SQE where it is (on the stack); the others
	// may outlive this call (a goroutine per I/O command) and get a copy.
	if sqe.Opcode != nvme.OpcodeFabrics && c.ctrl != nil && c.qid != 0 && c.inline(&sqe, data) {
		return
	}
	cmd := new(pdu.Command)
	*cmd = sqe
	if cmd.Opcode == nvme.OpcodeFabrics {
		c.fabrics(cmd, data)
		c.t.bufs.put(data)
		return
	}
	if c.ctrl == nil {
		c.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSequenceError), 0, 0)
		c.t.bufs.put(data)
		return
	}
	if c.qid == 0 {
		c.ctrl.admin(c, cmd, data)
		c.t.bufs.put(data)
		return
	}
	c.inflight.Add(1)
	c.active.Add(1)
	// Reads and in-capsule writes to a namespace that can start transfers
	// begin here, so the device is busy before any goroutine is scheduled;
	// a goroutine then waits for the device and answers.
	if finish := c.begin(cmd, data); finish != nil {
		go func() {
			defer c.inflight.Done()
			defer c.active.Add(-1)
			finish()
		}()
		return
	}
	go func() {
		defer c.inflight.Done()
		defer c.active.Add(-1)
		c.io(cmd, data)
	}()
}

// inTurn sends the answer of a device-backed command that moved length
// bytes in the connection's answer turn, letting the netpoller run
// afterwards when other commands are in flight (see answerTurn). Smaller
// transfers answer at once: their sends are cheap next to the yields and
// coalesce in the Writer when they come together.
func (c *conn) inTurn(length int, send func()) {
	if length < turnMinTransfer {
		send()
		return
	}
	c.turn.do(send, func() bool { return c.active.Load() > 1 })
}

// h2cData places one H2CData PDU's payload into its R2T buffer.
func (c *conn) h2cData(f *pdu.Frame) error {
	cccid, ttag, datao, datal := f.DataHeader()
	c.mu.Lock()
	st := c.r2ts[ttag]
	c.mu.Unlock()
	raw := f.Raw()
	if st == nil {
		return pdu.NewError("ttag", pdu.FESInvalidHeaderField, 10, raw, "H2CData for unknown TTAG")
	}
	if st.cccid != cccid {
		return pdu.NewError("cccid", pdu.FESInvalidHeaderField, 8, raw, "H2CData CCCID does not match the R2T")
	}
	if int(datao) != st.received || int(datao)+int(datal) > len(st.buf) {
		return pdu.NewError("datao", pdu.FESDataOutOfRange, 12, raw, "H2CData outside the R2T window or out of order")
	}
	if err := c.r.ReadData(st.buf[datao : datao+datal]); err != nil {
		if !pdu.IsDataDigest(err) {
			return err
		}
		st.badDigest = true // the command fails, the connection goes on
	}
	st.received += int(datal)
	if st.received == len(st.buf) {
		c.mu.Lock()
		claimed := c.r2ts[ttag] == st // else the worker gave up on it
		if claimed {
			delete(c.r2ts, ttag)
		}
		c.mu.Unlock()
		if st.inline != nil {
			st.inline()
			return nil
		}
		if claimed && st.start != nil && !st.badDigest {
			st.wait = st.start(st.buf)
		}
		close(st.done)
	}
	return nil
}

// checkInCapsule validates the SGL of a command whose data came in the
// capsule.
func checkInCapsule(cmd *pdu.Command, inCapsule []byte, length int) error {
	if len(inCapsule) != length || int(cmd.SGL.Len) != length || cmd.SGL.Addr != 0 {
		return nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid)
	}
	return nil
}

// fetchData returns the host→controller data of cmd: in-capsule, or pulled
// with one R2T. owned reports whether the buffer may go back to the pool.
// With start, R2T data is handed to start by the reader goroutine as soon
// as it is complete, and wait is what start returned (nil otherwise: the
// caller transfers the data itself).
func (c *conn) fetchData(cmd *pdu.Command, inCapsule []byte, length int, start func([]byte) func() error) (buf []byte, owned bool, wait func() error, err error) {
	switch cmd.SGL.Type {
	case pdu.SGLInCapsule:
		if err := checkInCapsule(cmd, inCapsule, length); err != nil {
			return nil, false, nil, err
		}
		return inCapsule, true, nil, nil
	case pdu.SGLTransport:
		if len(inCapsule) != 0 || int(cmd.SGL.Len) != length {
			return nil, false, nil, nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid)
		}
	default:
		return nil, false, nil, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
	}
	st := &r2tState{cccid: cmd.CID, buf: c.t.bufs.get(length), start: start, done: make(chan struct{})}
	ttag := c.addR2T(st)
	if err := c.w.Send(&pdu.R2T{CCCID: cmd.CID, TTAG: ttag, R2TO: 0, R2TL: uint32(length)}); err != nil {
		c.abandon(ttag, st)
		return nil, false, nil, err
	}
	select {
	case <-st.done:
	case <-c.ctx.Done():
		if !c.abandon(ttag, st) {
			// The reader claimed the data and may have started the device
			// transfer: take its outcome as if done had won.
			<-st.done
			break
		}
		return nil, false, nil, c.ctx.Err()
	}
	if st.badDigest {
		c.t.bufs.put(st.buf)
		return nil, false, nil, nvme.Errf(nvme.SCTGeneric, nvme.SCTransientTranspt)
	}
	return st.buf, true, st.wait, nil
}

// addR2T registers st under a free TTAG and returns it. At most SQ size
// R2Ts are outstanding, so a free TTAG always exists.
func (c *conn) addR2T(st *r2tState) uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ttag := c.nextTTAG
	for i := 0; i < 65536; i++ {
		if _, used := c.r2ts[ttag]; !used {
			break
		}
		ttag++
	}
	c.nextTTAG = ttag + 1
	c.r2ts[ttag] = st
	return ttag
}

// abandon withdraws the R2T ttag unless the reader already claimed its
// completed data. After true, the reader never touches st again except to
// finish a ReadData already in progress (so st.buf is left to the GC).
func (c *conn) abandon(ttag uint16, st *r2tState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r2ts[ttag] != st {
		return false
	}
	delete(c.r2ts, ttag)
	return true
}
