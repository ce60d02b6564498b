package target

import (
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

// Commands of a namespace.Immediate (memory) namespace run on the
// connection's reader goroutine, start to finish: no goroutine per
// command, no wake-up, and their answers are queued in the Writer
// (pdu.Writer.Queue) and written together, in one writev, once no further
// whole PDU is buffered (or inlinePushBytes are waiting), with
// pdu.Writer.Push: one non-blocking writev by the reader, and only what
// the socket does not take at once is left to a goroutine. The reader never
// waits for the socket, so a host that is blocked writing to us while it
// does not read (a single-threaded blocking host) cannot deadlock with it.
// The reader stops taking commands only when more answers wait than a host
// that respects its SQ size can have outstanding (pendingLimit). A read's data is
// copied once, from the namespace straight into the Writer's output
// (pdu.AppendC2HDataFill); an R2T write's H2CData lands in a pool buffer
// and is copied into the namespace by the reader when the last byte is in.
// A memory copy is what a goroutine hand-off would have waited for anyway,
// and is shorter than the hand-off (measured in doc.go, Performance).

// inlinePushBytes bounds the answers queued before the reader writes them
// even though more commands are buffered, so a host that streams commands
// without pause still gets answers (and the Writer's memory stays small).
const inlinePushBytes = 256 << 10

// pendingLimit is the most queued answer bytes a host that respects its
// SQ size can cause: one answer of at most MaxTransfer per entry, plus
// headers. Beyond it the reader waits for the flusher.
func (c *conn) pendingLimit() int {
	return (int(c.sqsize) + 1) * (c.t.cfg.MaxTransfer + 1024)
}

// inline runs cmd on the reader goroutine if its namespace is Immediate and
// it is a Read, Write, Flush or Write Zeroes; it then owns inCapsule. false:
// dispatch runs it as usual.
func (c *conn) inline(cmd *pdu.Command, inCapsule []byte) bool {
	if len(inCapsule) > c.icd {
		return false
	}
	n := c.ctrl.sub.namespace(cmd.NSID)
	if n == nil {
		return false
	}
	im, ok := n.ns.(namespace.Immediate)
	if !ok {
		return false
	}
	switch cmd.Opcode {
	case nvme.CmdRead:
		c.inlineRead(cmd, n, im)
	case nvme.CmdWrite:
		c.inlineWrite(cmd, n, im, inCapsule)
		return true // inlineWrite owns inCapsule
	case nvme.CmdFlush:
		n.otherOps.Add(1)
		c.queueCompletion(cmd.CID, nil)
	case nvme.CmdWriteZeroes:
		c.queueCompletion(cmd.CID, c.writeZeroes(cmd, n))
	default:
		return false
	}
	c.t.bufs.put(inCapsule)
	return true
}

// queueCompletion queues cid's CapsuleResp (see completion).
func (c *conn) queueCompletion(cid uint16, err error) {
	c.w.Queue(func(b []byte, o pdu.Options) ([]byte, error) {
		cpl := c.completion(cid, err, 0, 0)
		return cpl.AppendPDU(b, o), nil
	})
	c.pushPending = true
}

func (c *conn) inlineRead(cmd *pdu.Command, n *nsState, im namespace.Immediate) {
	off, length, err := c.lbaRange(cmd, n, true)
	if err == nil && (cmd.SGL.Type != pdu.SGLTransport || int(cmd.SGL.Len) != length) {
		err = nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid)
	}
	if err != nil {
		c.queueCompletion(cmd.CID, err)
		return
	}
	success := c.sqFlowOff || c.t.cfg.C2HSuccess
	err = c.w.Queue(func(b []byte, o pdu.Options) ([]byte, error) {
		b, err := pdu.AppendC2HDataFill(b, o, cmd.CID, true, success, length, func(dst []byte) error {
			return im.ReadAt(c.ctx, dst, off)
		})
		if err != nil {
			return b, err
		}
		if success {
			c.sqhd.Add(1) // completed without a CQE
		} else {
			cpl := c.completion(cmd.CID, nil, 0, 0)
			b = cpl.AppendPDU(b, o)
		}
		return b, nil
	})
	c.pushPending = true
	if err != nil {
		if c.ctx.Err() == nil {
			n.errs.Add(1)
			c.t.cfg.Logger.Warn("nvme-tcp namespace I/O failed", "nsid", n.nsid, "err", err)
			c.queueCompletion(cmd.CID, err)
		}
		return
	}
	n.readOps.Add(1)
	n.readBytes.Add(uint64(length))
}

// inlineWrite writes in-capsule data at once, or queues one R2T for the
// whole transfer and finishes when h2cData has received it (finishR2T).
func (c *conn) inlineWrite(cmd *pdu.Command, n *nsState, im namespace.Immediate, inCapsule []byte) {
	pool := &c.t.bufs
	off, length, err := c.lbaRange(cmd, n, true)
	if err != nil {
		pool.put(inCapsule)
		c.queueCompletion(cmd.CID, err)
		return
	}
	switch cmd.SGL.Type {
	case pdu.SGLInCapsule:
		if err = checkInCapsule(cmd, inCapsule, length); err == nil {
			err = c.finishWrite(n, im, inCapsule, off)
		}
		pool.put(inCapsule)
		c.queueCompletion(cmd.CID, err)
		return
	case pdu.SGLTransport:
		if len(inCapsule) != 0 || int(cmd.SGL.Len) != length {
			pool.put(inCapsule)
			c.queueCompletion(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid))
			return
		}
	default:
		pool.put(inCapsule)
		c.queueCompletion(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField))
		return
	}
	cid := cmd.CID
	st := &r2tState{cccid: cid, buf: pool.get(length)}
	st.inline = func() {
		defer pool.put(st.buf)
		if st.badDigest {
			c.queueCompletion(cid, nvme.Errf(nvme.SCTGeneric, nvme.SCTransientTranspt))
			return
		}
		c.queueCompletion(cid, c.finishWrite(n, im, st.buf, off))
	}
	ttag := c.addR2T(st)
	c.w.Queue(func(b []byte, o pdu.Options) ([]byte, error) {
		r2t := pdu.R2T{CCCID: cid, TTAG: ttag, R2TO: 0, R2TL: uint32(length)}
		return r2t.AppendPDU(b, o), nil
	})
	c.pushPending = true
}

// finishWrite copies a write's data into the namespace and counts it.
func (c *conn) finishWrite(n *nsState, im namespace.Immediate, data []byte, off int64) error {
	if err := im.WriteAt(c.ctx, data, off); err != nil {
		n.errs.Add(1)
		c.t.cfg.Logger.Warn("nvme-tcp namespace I/O failed", "nsid", n.nsid, "err", err)
		return err
	}
	n.writeOps.Add(1)
	n.writeBytes.Add(uint64(len(data)))
	return nil
}
