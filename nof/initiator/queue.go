package initiator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

// request is one command slot; its index in queue.slots is its CID.
type request struct {
	cid      uint16
	readBuf  []byte // C2HData destination
	writeBuf []byte // data sent on R2T
	cpl      pdu.Completion
	done     chan struct{} // one signal per completion (buffered 1)
	// onDone, if set, is called with the completion on the receiver
	// goroutine instead of signalling done, after the slot was freed
	// (submitAsync).
	onDone func(pdu.Completion)

	// guarded by queue.mu
	badDigest bool // a C2HData data digest failed: complete with an error
	completed bool // finish has signalled done
	active    bool
	abandoned bool // the submitter gave up (context); free on completion
	busy      bool // the receiver is moving data into/out of the buffers
}

// queue is one NVMe/TCP connection (a queue pair).
type queue struct {
	qid        uint16
	nc         net.Conn
	r          *pdu.Reader
	w          *pdu.Writer
	maxH2CData int
	sem        chan struct{} // one token per free slot
	recvDone   chan struct{} // closed when the receiver goroutine exits
	// flushScheduled: a submitter will write the queued capsules (send).
	flushScheduled atomic.Bool
	// pushPending: a completion callback on the receiver goroutine queued
	// capsules (submitAsync) that the receiver pushes once no further
	// whole PDU is buffered. Touched only by the receiver goroutine.
	pushPending bool

	mu     sync.Mutex // guards the fields below and request state flags
	slots  []*request
	free   []uint16
	err    error // terminal error once the queue failed
	closed bool
}

func newQueue(qid uint16, nc net.Conn, depth int) *queue {
	q := &queue{qid: qid, nc: nc, sem: make(chan struct{}, depth), recvDone: make(chan struct{})}
	q.slots = make([]*request, depth)
	for i := range q.slots {
		q.slots[i] = &request{cid: uint16(i), done: make(chan struct{}, 1)}
		q.free = append(q.free, uint16(depth-1-i))
		q.sem <- struct{}{}
	}
	q.w = pdu.NewWriter(nc)
	return q
}

// fail records err, closes the socket and so stops the receiver.
func (q *queue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.closed = true
	q.mu.Unlock()
	q.w.Fail(err)
	q.nc.Close()
}

func (q *queue) failure() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		return net.ErrClosed
	}
	return q.err
}

func transportErr(err error) error {
	return fmt.Errorf("%w: %w", kverr.New(kverr.TransferFail, "", "nvme-tcp queue failed"), err)
}

// submit sends cmd (with in-capsule data, or with write data for R2T in
// writeBuf, or a C2H destination in readBuf) and waits for its completion.
func (q *queue) submit(ctx context.Context, cmd *pdu.Command, inCapsule, writeBuf, readBuf []byte) (pdu.Completion, error) {
	select {
	case <-q.sem:
	case <-ctx.Done():
		return pdu.Completion{}, ctx.Err()
	case <-q.recvDone:
		return pdu.Completion{}, transportErr(q.failure())
	}
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		q.sem <- struct{}{}
		return pdu.Completion{}, transportErr(q.err)
	}
	cid := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	req := q.slots[cid]
	req.active, req.abandoned, req.busy, req.badDigest, req.completed = true, false, false, false, false
	req.readBuf, req.writeBuf = readBuf, writeBuf
	q.mu.Unlock()

	cmd.CID = cid
	if err := q.send(&pdu.CapsuleCmd{Cmd: *cmd, Data: inCapsule}); err != nil {
		q.fail(err)
	}
	select {
	case <-req.done:
		cpl := req.cpl
		q.release(req)
		return cpl, nil
	case <-q.recvDone:
		return pdu.Completion{}, transportErr(q.failure())
	case <-ctx.Done():
		q.mu.Lock()
		if req.completed {
			// The completion won the race: take it, the slot is ours to free.
			q.mu.Unlock()
			<-req.done
			cpl := req.cpl
			q.release(req)
			return cpl, nil
		}
		if !req.busy {
			req.abandoned = true
			q.mu.Unlock()
			return pdu.Completion{}, ctx.Err()
		}
		q.mu.Unlock()
		// Data is moving through the caller's buffer right now: wait for
		// that to end (completion or queue death) before returning.
		select {
		case <-req.done:
			cpl := req.cpl
			q.release(req)
			return cpl, nil
		case <-q.recvDone:
			return pdu.Completion{}, transportErr(q.failure())
		}
	}
}

// send queues a command capsule and makes sure it is written, batching
// the capsules of callers that submit together: the first caller to find
// no flush scheduled schedules one, lets the other runnable goroutines
// run first (callers just woken by a batch of completions queue their
// next commands meanwhile), then writes everything queued in one writev.
// The others only queue: the scheduled flush, which clears the flag after
// they queued (they saw it set), writes theirs too.
func (q *queue) send(m *pdu.CapsuleCmd) error {
	if len(m.Data) >= 16<<10 {
		return q.w.Send(m) // large in-capsule data is written from the caller's buffer
	}
	if err := q.w.Queue(func(b []byte, o pdu.Options) ([]byte, error) { return m.AppendPDU(b, o), nil }); err != nil {
		return err
	}
	if !q.flushScheduled.CompareAndSwap(false, true) {
		return nil
	}
	runtime.Gosched()
	q.flushScheduled.Store(false)
	return q.w.Send()
}

func (q *queue) release(req *request) {
	q.mu.Lock()
	req.active = false
	req.readBuf, req.writeBuf = nil, nil
	q.free = append(q.free, req.cid)
	q.mu.Unlock()
	q.sem <- struct{}{}
}

// lookup returns the active request for cid and marks it busy, or nil if
// it is unknown or abandoned.
func (q *queue) lookup(cid uint16) (req *request, known bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if int(cid) >= len(q.slots) || !q.slots[cid].active {
		return nil, false
	}
	req = q.slots[cid]
	if req.abandoned {
		return nil, true
	}
	req.busy = true
	return req, true
}

func (q *queue) unbusy(req *request) {
	q.mu.Lock()
	req.busy = false
	q.mu.Unlock()
}

// finish completes cid with cpl.
func (q *queue) finish(cid uint16, cpl pdu.Completion) {
	q.mu.Lock()
	if int(cid) >= len(q.slots) || !q.slots[cid].active {
		q.mu.Unlock()
		return
	}
	req := q.slots[cid]
	req.busy = false
	if req.badDigest && cpl.Status&0xFFFE == 0 {
		cpl.Status = (&nvme.StatusError{SCT: nvme.SCTGeneric, SC: nvme.SCTransientTranspt}).Status()
	}
	req.badDigest = false
	if req.abandoned {
		req.active = false
		req.readBuf, req.writeBuf = nil, nil
		q.free = append(q.free, cid)
		q.mu.Unlock()
		q.sem <- struct{}{}
		return
	}
	if cb := req.onDone; cb != nil {
		req.active, req.onDone = false, nil
		req.readBuf, req.writeBuf = nil, nil
		q.free = append(q.free, cid)
		q.mu.Unlock()
		q.sem <- struct{}{}
		cb(cpl)
		return
	}
	req.cpl = cpl
	req.completed = true
	q.mu.Unlock()
	req.done <- struct{}{}
}

// submitAsync sends cmd like submit but does not wait: done is called with
// the completion on the queue's receiver goroutine (so it must not block;
// it may call submitAsync again, which is how a load generator keeps a
// queue full without a goroutine or a wake-up per command, as SPDK's
// completion callbacks do). Called from the receiver goroutine (inRecv),
// the capsule is only queued: the receiver writes everything its callbacks
// queued in one non-blocking writev once no further whole PDU is buffered.
// It fails at once, without calling done, when no slot is free or the
// queue failed; done is never called if the queue fails later (watch
// recvDone).
func (q *queue) submitAsync(cmd *pdu.Command, inCapsule, writeBuf, readBuf []byte, inRecv bool, done func(pdu.Completion)) error {
	select {
	case <-q.sem:
	default:
		return kverr.New(kverr.UnavailableInCurrentStatus, "", "nvme-tcp queue %d full", q.qid)
	}
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		q.sem <- struct{}{}
		return transportErr(q.err)
	}
	cid := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	req := q.slots[cid]
	req.active, req.abandoned, req.busy, req.badDigest, req.completed = true, false, false, false, false
	req.readBuf, req.writeBuf, req.onDone = readBuf, writeBuf, done
	q.mu.Unlock()
	cmd.CID = cid
	m := &pdu.CapsuleCmd{Cmd: *cmd, Data: inCapsule}
	if !inRecv {
		if err := q.w.Send(m); err != nil {
			q.fail(err)
			return transportErr(err)
		}
		return nil
	}
	if err := q.w.Queue(func(b []byte, o pdu.Options) ([]byte, error) { return m.AppendPDU(b, o), nil }); err != nil {
		q.fail(err)
		return transportErr(err)
	}
	q.pushPending = true
	return nil
}

// receive is the queue's reader goroutine.
func (q *queue) receive() {
	defer close(q.recvDone)
	for {
		// Capsules that completion callbacks queued go out together once
		// no further whole PDU is here (each PDU's callback may queue one).
		if q.pushPending && !q.r.NextBuffered() {
			q.pushPending = false
			q.w.Push()
		}
		f, err := q.r.Next()
		if err != nil {
			var pe *pdu.Error
			if errors.As(err, &pe) {
				q.w.Send(pdu.TermReqFor(pe, true))
			}
			q.fail(err)
			return
		}
		switch f.Type {
		case pdu.TypeCapsuleResp:
			cpl := f.Completion()
			q.finish(cpl.CID, cpl)
		case pdu.TypeC2HData:
			if err := q.c2hData(f); err != nil {
				q.fail(err)
				return
			}
		case pdu.TypeR2T:
			if err := q.r2t(f); err != nil {
				q.fail(err)
				return
			}
		case pdu.TypeC2HTermReq:
			tr := f.TermReq()
			q.fail(fmt.Errorf("nvme-tcp: controller terminated the connection (FES %d, FEI %d)", tr.FES, tr.FEI))
			return
		}
	}
}

func (q *queue) c2hData(f *pdu.Frame) error {
	cccid, _, datao, datal := f.DataHeader()
	flags := f.Flags
	req, known := q.lookup(cccid)
	if !known {
		return pdu.NewError("cccid", pdu.FESInvalidHeaderField, 8, f.Raw(), "C2HData for unknown command")
	}
	if req == nil { // abandoned: drop the data
		_, err := q.r.Data()
		return err
	}
	if int(datao)+int(datal) > len(req.readBuf) {
		q.unbusy(req)
		return pdu.NewError("datao", pdu.FESDataOutOfRange, 12, f.Raw(), "C2HData beyond the command's buffer")
	}
	if err := q.r.ReadData(req.readBuf[datao : datao+datal]); err != nil {
		if !pdu.IsDataDigest(err) {
			q.unbusy(req)
			return err
		}
		q.mu.Lock()
		req.badDigest = true // the read fails, the connection goes on
		q.mu.Unlock()
	}
	q.unbusy(req)
	if flags&pdu.FlagSuccess != 0 {
		q.finish(cccid, pdu.Completion{CID: cccid, SQID: q.qid})
	}
	return nil
}

func (q *queue) r2t(f *pdu.Frame) error {
	r := f.R2T()
	req, known := q.lookup(r.CCCID)
	if !known {
		return pdu.NewError("cccid", pdu.FESInvalidHeaderField, 8, f.Raw(), "R2T for unknown command")
	}
	if req == nil {
		return nil // abandoned; the controller will time the transfer out
	}
	defer q.unbusy(req)
	end := uint64(r.R2TO) + uint64(r.R2TL)
	if r.R2TL == 0 || end > uint64(len(req.writeBuf)) {
		return pdu.NewError("r2tl", pdu.FESDataOutOfRange, 16, f.Raw(), "R2T beyond the command's data")
	}
	for off := r.R2TO; off < uint32(end); {
		n := min(uint32(q.maxH2CData), uint32(end)-off)
		last := off+n == uint32(end)
		if err := q.w.Send(&pdu.H2CData{CCCID: r.CCCID, TTAG: r.TTAG, DATAO: off, Last: last, Data: req.writeBuf[off : off+n]}); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// statusErr converts a non-success completion to an error carrying both a
// kverr code and the *nvme.StatusError.
func statusErr(cpl pdu.Completion) error {
	err := nvme.StatusFrom(cpl.Status, cpl.DW0)
	if err == nil {
		return nil
	}
	se := err.(*nvme.StatusError)
	code := kverr.TransferFail
	switch {
	case se.SCT == nvme.SCTGeneric && (se.SC == nvme.SCLBAOutOfRange || se.SC == nvme.SCInvalidField):
		code = kverr.InvalidParams
	case se.SCT == nvme.SCTGeneric && se.SC == nvme.SCInvalidNamespace:
		code = kverr.ObjectNotFound
	case se.SCT == nvme.SCTSpecific && (se.SC == nvme.SCConnectInvalidHost || se.SC == nvme.SCAuthRequired):
		code = kverr.Unauthorized
	case se.SCT == nvme.SCTSpecific && se.SC == nvme.SCConnectInvalidParam:
		code = kverr.InvalidParams
	}
	return fmt.Errorf("%w: %w", kverr.New(code, "", "nvme command failed"), se)
}
