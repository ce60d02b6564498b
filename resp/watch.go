package resp

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A long plain SET of a key last seen with the same size is compared with
// the stored value while it arrives (inplace.go, watchSet). On a TCP
// connection the bytes are read into a small bounce buffer, compared
// there and dropped: a value equal to the stored one is never written to
// memory of ours (kernel -> bounce buffer, which stays in cache; the
// value buffer is not touched). That halves the memory traffic of the
// common case (content-derived keys stored again) against reading the
// whole value into its buffer and comparing it there.
//
// The bytes compared equal and dropped are the stored value's, so they can
// be taken back from segment memory as long as that memory still holds
// the object: until the read lease the comparison started under ends
// (the master frees nothing under a lease), and until this front end
// removes the key. A watch is therefore registered (Server.watching) for
// its time, and whatever stops it from reading segment memory first
// copies the compared prefix into the value buffer ("keeps" it):
//
//   - a byte that differs: the rest is read into the value buffer;
//   - a removal of the key by this front end (forceRemove, under the key's
//     exclusive lock), before it removes;
//   - the lease nearing its end (watchMargin before it; a read that waits
//     for a slow client wakes then).
//
// Only a forced Remove by another SDK client can free the extent under a
// watch, the same window as for an in-place GET (see the package doc,
// "Copies"); there the prefix taken back would be wrong bytes, as the
// comparison's verdict already could be.

// watchChunk is how much of a watched value is read and compared at a
// time: the bounce buffer's size, small enough to stay in cache.
const watchChunk = 128 << 10

// watchMargin: a watch stops reading segment memory this long before its
// read lease ends.
const watchMargin = time.Second

// watchState is one long SET value being compared while it arrives.
type watchState struct {
	key   string
	until time.Time   // segment memory is read only before this (lease end - watchMargin); zero: not registered, compared in dst (readArg)
	table *watchTable // where it is registered; nil once ended

	mu       sync.Mutex // guards the fields below; held while seg is read
	seg      []byte     // the stored value (segment memory); nil once kept
	dst      []byte     // the value buffer the argument is read into
	filled   int        // dst[:filled] holds the value's bytes
	progress int        // bytes received; [filled, progress) were equal to seg and dropped
	same     bool       // every byte received so far equalled seg
	kept     bool       // the prefix was taken from seg (seg is no longer read)
	lost     bool       // the dropped prefix could not be taken back (lease over)
}

// keepLocked copies the dropped prefix from segment memory into the value
// buffer and stops reading segment memory. It fails (lost) past the
// lease, when the memory may hold another object.
func (w *watchState) keepLocked(now time.Time) {
	if w.kept || w.lost {
		return
	}
	if now.After(w.until.Add(watchMargin)) {
		w.lost, w.seg = true, nil
		return
	}
	copy(w.dst[w.filled:w.progress], w.seg[w.filled:w.progress])
	w.filled = w.progress
	w.kept, w.seg = true, nil
}

// end unregisters w (once).
func (w *watchState) end() {
	if w.table != nil {
		w.table.remove(w)
		w.table = nil
	}
}

// watchTable is the watches in progress, by key.
type watchTable struct {
	n  atomic.Int32 // watches registered; read without the lock by every removal
	mu sync.Mutex
	// guarded by mu:
	m map[string][]*watchState
}

func (t *watchTable) add(w *watchState) {
	w.table = t
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string][]*watchState{}
	}
	t.m[w.key] = append(t.m[w.key], w)
	t.n.Add(1)
	t.mu.Unlock()
}

func (t *watchTable) remove(w *watchState) {
	t.mu.Lock()
	ws := t.m[w.key]
	for i, x := range ws {
		if x == w {
			ws[i] = ws[len(ws)-1]
			ws[len(ws)-1] = nil
			ws = ws[:len(ws)-1]
			t.n.Add(-1)
			break
		}
	}
	if len(ws) == 0 {
		delete(t.m, w.key)
	} else {
		t.m[w.key] = ws
	}
	t.mu.Unlock()
}

// keepAll makes every watch of key keep its prefix: the caller is about to
// remove key (holding its exclusive lock).
func (t *watchTable) keepAll(key string) {
	if t.n.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for _, w := range t.m[key] {
		w.mu.Lock()
		w.keepLocked(now)
		w.mu.Unlock()
	}
}

// longReader is what a reader's source offers for the rest of a long
// argument (rawIO): reads as large as asked, straight from the socket,
// waiting only when it holds nothing, and not past until (non-zero) when
// it must wait (then os.ErrDeadlineExceeded).
type longReader interface {
	readLong(p []byte, until time.Time) (int, error)
	endLong()
}

// readWatched reads a watched argument (w.dst) from lr, the bytes the read
// buffer holds first. Bytes equal to the stored value's go through the
// bounce buffer only; from the first byte that differs (or once kept) the
// rest goes straight into w.dst.
func (r *reader) readWatched(lr longReader, w *watchState) error {
	defer lr.endLong()
	defer w.end()
	// What the read buffer holds: into dst, compared.
	w.mu.Lock()
	for w.filled < len(w.dst) && r.br.Buffered() > 0 {
		n, _ := r.br.Read(w.dst[w.filled:])
		w.filled += n
	}
	w.progress = w.filled
	if w.seg != nil && !bytes.Equal(w.dst[:w.filled], w.seg[:w.filled]) {
		w.same = false
		w.keepLocked(time.Now())
	}
	w.mu.Unlock()
	var bounce *buffer
	defer func() { r.pool.put(bounce) }()
	for w.progress < len(w.dst) {
		w.mu.Lock()
		direct := w.kept || w.lost
		w.mu.Unlock()
		if direct {
			n, err := lr.readLong(w.dst[w.progress:], time.Time{})
			w.mu.Lock()
			w.progress += n
			if w.kept {
				w.filled = w.progress
			}
			w.mu.Unlock()
			if err != nil && w.progress < len(w.dst) {
				return err
			}
			continue
		}
		if bounce == nil {
			bounce = r.pool.get(watchChunk)
		}
		b := bounce.b[:min(len(bounce.b), len(w.dst)-w.progress)]
		n, err := lr.readLong(b, w.until)
		w.mu.Lock()
		if n > 0 {
			switch {
			case w.kept || w.lost:
				// A removal kept the prefix meanwhile.
				copy(w.dst[w.progress:], b[:n])
			case !bytes.Equal(b[:n], w.seg[w.progress:w.progress+n]):
				w.same = false
				w.keepLocked(time.Now())
				copy(w.dst[w.progress:], b[:n])
			}
			w.progress += n
			if w.kept {
				w.filled = w.progress
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) || time.Now().After(w.until) {
			// The lease nears its end: stop reading segment memory.
			w.keepLocked(time.Now())
			err = nil
		}
		w.mu.Unlock()
		if err != nil && w.progress < len(w.dst) {
			return err
		}
	}
	// The verdict, while the watch still holds off removals.
	w.mu.Lock()
	now := time.Now()
	switch {
	case w.lost:
	case !w.same:
		r.compared = true
	case w.kept:
		// Equal so far, but the stored object may have gone meanwhile:
		// the caller compares again.
	case now.Before(w.until):
		r.compared, r.same = true, true
	default:
		w.keepLocked(now)
	}
	r.lost = w.lost
	w.mu.Unlock()
	w.end()
	return nil
}
