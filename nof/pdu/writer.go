package pdu

import (
	"io"
	"net"
	"sync"
	"syscall"
)

const (
	// maxPending bounds the bytes queued in a Writer before senders wait.
	maxPending = 8 << 20
	// refThreshold is the data size from which a PDU's data is written from
	// the sender's buffer (Send then waits until it is on the wire) instead
	// of being copied.
	refThreshold = 16 << 10
)

// seg is a pending piece of output: a range of the arena, or ext.
type seg struct {
	ext      []byte
	from, to int
}

// Writer encodes PDUs from many goroutines onto one stream. Headers and
// small PDUs are appended to an arena; large data is referenced. Whichever
// sender finds no write in progress becomes the flusher and writes all
// pending pieces (batching PDUs queued meanwhile, with writev on sockets)
// without holding the lock.
type Writer struct {
	w io.Writer

	mu       sync.Mutex
	cond     *sync.Cond // signalled when a flush round completes
	opt      Options    // encoding options after negotiation
	arena    []byte     // bytes of pending segments, guarded by mu
	spare    []byte     // the other arena of the double-buffer pair
	segs     []seg      // pending output in order
	spareSeg []seg
	pending  int    // bytes pending
	taken    uint64 // flush rounds taken by a flusher
	done     uint64 // flush rounds written
	flushing bool   // a goroutine is writing outside the lock
	err      error  // first write error; sticky

	iov  net.Buffers     // a round's pieces; used by the flushing goroutine only
	iovs iovScratch      // Push's iovecs; used by the flushing goroutine only
	rc   syscall.RawConn // w as a socket, for Push's non-blocking writev (nil: not one)
}

// NewWriter returns a Writer over w.
func NewWriter(w io.Writer) *Writer {
	wr := &Writer{w: w}
	wr.cond = sync.NewCond(&wr.mu)
	if sc, ok := w.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			wr.rc = rc
		}
	}
	return wr
}

// SetOptions sets the digests/alignment used for later PDUs.
func (w *Writer) SetOptions(o Options) {
	w.mu.Lock()
	w.opt = o
	w.mu.Unlock()
}

// Options returns the current encoding options.
func (w *Writer) Options() Options {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opt
}

func (w *Writer) addArena(from int) {
	if to := len(w.arena); to > from {
		if n := len(w.segs); n > 0 && w.segs[n-1].ext == nil && w.segs[n-1].to == from {
			w.segs[n-1].to = to
		} else {
			w.segs = append(w.segs, seg{from: from, to: to})
		}
		w.pending += to - from
	}
}

// Send encodes ms (in order, back to back) and makes sure they are
// written: either by this call or by the flush already in progress. When a
// message carries at least 16 KiB of data, that data is written from the
// caller's buffer and Send returns only once it is on the wire. It returns
// the sticky write error, if any.
func (w *Writer) Send(ms ...Message) error {
	w.mu.Lock()
	for w.err == nil && w.pending > maxPending {
		w.cond.Wait()
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	referenced := false
	for _, m := range ms {
		from := len(w.arena)
		if f, ok := m.(framer); ok {
			if t, fl, psh, data := f.frame(); len(data) >= refThreshold {
				var trailer [DigestLen]byte
				var dd bool
				w.arena, trailer, dd = appendFrameHead(w.arena, t, fl, psh, data, w.opt)
				w.addArena(from)
				w.segs = append(w.segs, seg{ext: data})
				w.pending += len(data)
				if dd {
					from = len(w.arena)
					w.arena = append(w.arena, trailer[:]...)
					w.addArena(from)
				}
				referenced = true
				continue
			}
		}
		w.arena = m.AppendPDU(w.arena, w.opt)
		w.addArena(from)
	}
	myRound := w.taken + 1
	if w.flushing {
		for referenced && w.done < myRound && w.err == nil {
			w.cond.Wait()
		}
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.flushing = true
	w.flushLocked()
	w.flushing = false
	err := w.err
	w.cond.Broadcast()
	w.mu.Unlock()
	return err
}

// flushLocked writes rounds until nothing is pending. The caller holds
// w.mu and has set flushing; w.mu is released while each round is written.
func (w *Writer) flushLocked() {
	for len(w.segs) > 0 && w.err == nil {
		arena, segs := w.takeLocked()
		w.mu.Unlock()
		err := writeAll(w.w, w.buffers(arena, segs))
		w.mu.Lock()
		w.endRoundLocked(arena, segs, err)
	}
}

// takeLocked starts a flush round: the pending pieces are taken and new
// ones go to the other arena.
func (w *Writer) takeLocked() ([]byte, []seg) {
	arena, segs := w.arena, w.segs
	w.arena, w.segs = w.spare[:0], w.spareSeg[:0]
	w.pending = 0
	w.taken++
	w.cond.Broadcast() // senders blocked on maxPending may append again
	return arena, segs
}

// buffers lists a round's pieces for writev, in a slice only the flusher
// uses.
func (w *Writer) buffers(arena []byte, segs []seg) net.Buffers {
	w.iov = w.iov[:0]
	for _, s := range segs {
		if s.ext != nil {
			w.iov = append(w.iov, s.ext)
		} else {
			w.iov = append(w.iov, arena[s.from:s.to])
		}
	}
	return w.iov
}

// endRoundLocked ends a flush round with its write error.
func (w *Writer) endRoundLocked(arena []byte, segs []seg, err error) {
	clear(segs) // drop references to callers' buffers
	if err != nil && w.err == nil {
		w.err = err
	}
	w.done++
	if cap(arena) <= 4<<20 {
		w.spare = arena[:0]
	} else {
		w.spare = nil
	}
	w.spareSeg = segs[:0]
	w.cond.Broadcast()
}

func writeAll(wr io.Writer, bufs net.Buffers) error {
	if len(bufs) == 1 {
		_, err := wr.Write(bufs[0])
		return err
	}
	_, err := bufs.WriteTo(wr) // consumes bufs
	return err
}

// Push starts writing what is queued without making the caller wait for
// the network. If a flush is in progress, it takes the queued PDUs along.
// Otherwise Push writes as much as the socket takes at once (one
// non-blocking writev); what the socket does not take, and whatever is
// queued meanwhile, a goroutine writes while the caller goes on (on a
// stream that is not a socket, that goroutine does the whole write). So a
// caller that must keep reading (a connection's reader goroutine) never
// blocks on a peer that does not read.
func (w *Writer) Push() {
	w.mu.Lock()
	if w.flushing || len(w.segs) == 0 || w.err != nil {
		w.mu.Unlock()
		return
	}
	w.flushing = true
	arena, segs := w.takeLocked()
	w.mu.Unlock()
	bufs := w.buffers(arena, segs)
	if w.rc != nil {
		rest, err := tryWritev(w.rc, bufs, &w.iovs)
		if err != nil || len(rest) == 0 {
			w.mu.Lock()
			w.endRoundLocked(arena, segs, err)
			if len(w.segs) == 0 || w.err != nil {
				w.flushing = false
				w.cond.Broadcast()
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			go w.background(nil, nil, nil) // what was queued during the writev
			return
		}
		bufs = rest
	}
	go w.background(bufs, arena, segs)
}

// background finishes a round Push began (segs not nil: bufs is what is
// left of it), then flushes until nothing is pending.
func (w *Writer) background(bufs net.Buffers, arena []byte, segs []seg) {
	if segs != nil {
		err := writeAll(w.w, bufs)
		w.mu.Lock()
		w.endRoundLocked(arena, segs, err)
	} else {
		w.mu.Lock()
	}
	w.flushLocked()
	w.flushing = false
	w.cond.Broadcast()
	w.mu.Unlock()
}

// Queue appends PDUs to the pending output without writing them and
// without waiting: enc appends whole encoded PDUs to b under the Writer's
// lock (so it must be quick and must not call the Writer), using o, the
// negotiated options, and returns the extended slice (or b and an error,
// which Queue returns). A later Send (Send() with no message just writes
// what is pending) or a flush already in progress writes them, so PDUs
// queued together go out in one write. It returns the sticky write error,
// if any, without calling enc.
func (w *Writer) Queue(enc func(b []byte, o Options) ([]byte, error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	from := len(w.arena)
	b, err := enc(w.arena, w.opt)
	if err != nil {
		return err
	}
	w.arena = b
	w.addArena(from)
	return nil
}

// WaitBelow waits until at most n queued bytes wait for a flush to take
// them (or the Writer failed, whose error it returns): backpressure for a
// goroutine that queues without writing.
func (w *Writer) WaitBelow(n int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && w.pending > n {
		w.cond.Wait()
	}
	return w.err
}

// Pending is the number of bytes queued and not yet taken by a flush.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending
}

// Rounds is the number of flush rounds written so far: one write or
// writev system call each (plus any needed to finish a short write).
func (w *Writer) Rounds() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Fail makes every later Send return err (used when the connection dies).
func (w *Writer) Fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}

// Flush waits until everything sent before it is on the wire (Send of a
// small PDU may return while a flush by another goroutine is still to write
// it) and returns the sticky write error, if any.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := w.taken
	if len(w.segs) > 0 {
		want++ // the flusher in progress takes them in its next round
	}
	for w.done < want && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}
