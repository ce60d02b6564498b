package resp

import (
	"bytes"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/crc32c"
)

// In-place reads (Config.Segments; see the package doc, "Copies"): when
// the front end runs in the process that serves the DRAM segments, a GET
// answers from the segment memory itself and a SET of the value a key
// already holds compares against it, under the read lease the master
// granted (client.View).

// getInPlace answers GET key from segment memory. handled is false when
// the value does not lie in this process's segments, or when a short
// value failed its check (the caller then reads it with the copying Get,
// which asks the master again and answers a miss for bad bytes). quit
// is true when the connection must be closed: a long value was sent and
// failed its check afterwards.
func (c *conn) getInPlace(key []byte) (handled, quit bool) {
	s := c.s
	k := string(key)
	if s.suspects.has(k) {
		return false, false
	}
	// Shared from before the view is taken (it may come from the lease
	// cache) until the check after the send: nothing this front end does
	// frees the extent meanwhile (keyLock).
	l := s.keyLock(k)
	l.RLock()
	res, n, rest, err := c.answerInPlace(k)
	l.RUnlock()
	// Replies that may flush the buffer (and so wait for the client) are
	// written here, after the lock.
	switch res {
	case inPlaceNot:
		return false, false
	case inPlaceMiss:
		s.misses.Add(1)
		c.w.null()
		return true, false
	case inPlaceErr:
		c.storeErr(err)
		return true, false
	case inPlaceFailed:
		return true, false
	case inPlaceBuffered:
		c.w.grown()
	case inPlaceBad:
		s.pool.put(rest)
		s.store.DropLease(k)
		s.suspects.add(k)
		s.log.Warn("resp: GET sent a value that failed its check afterwards; closing the connection", "key", k, "client", c.addr)
		c.w.err = errSentBadValue
		return true, true
	}
	if rest != nil {
		// What the socket did not take: the rest of the header (in the
		// reply buffer) and of the value.
		_ = c.w.flush()
		if c.w.err == nil {
			_, c.w.err = c.w.vectored().Write(rest.b)
		}
		s.pool.put(rest)
	}
	if res == inPlaceSentOpen {
		c.w.buf = append(c.w.buf, '\r', '\n')
	}
	s.hits.Add(1)
	s.recent.put(k, n)
	return true, false
}

// What answerInPlace did.
const (
	inPlaceNot      = iota // nothing: read the value with the copying Get
	inPlaceMiss            // no such key: answer nil
	inPlaceErr             // the store refused: answer the error
	inPlaceFailed          // the connection failed (c.w.err); its loop ends at the flush
	inPlaceBuffered        // the value is in the reply buffer, complete
	inPlaceSentOpen        // the value was sent (rest: what remains to send) and checked; the CRLF is due
	inPlaceBad             // the value was sent in part and failed its check
)

// answerInPlace is getInPlace's part under the key's lock: it takes the
// view and either copies a short value into the reply buffer or sends a
// long one from segment memory, and checks the bytes. n is the value's
// size. It never waits for the client (nothing here flushes the reply
// buffer).
func (c *conn) answerInPlace(k string) (res, n int, rest *buffer, err error) {
	s := c.s
	v, ok, err := s.store.View(s.ctx, k, s.cfg.Segments)
	switch {
	case err != nil && missing(err):
		return inPlaceMiss, 0, nil, nil
	case err != nil:
		return inPlaceErr, 0, nil, err
	case !ok:
		return inPlaceNot, 0, nil, nil
	case !v.Live(): // removed by another client since its lease was cached
		s.store.DropLease(k)
		return inPlaceNot, 0, nil, nil
	}
	n = len(v.Bytes)
	if n < bigBulk {
		// Copy into the reply buffer, checksummed in the same pass; the
		// reply is dropped from the buffer when the check fails.
		mark := len(c.w.buf)
		c.w.prefixed('$', int64(n))
		start := len(c.w.buf)
		c.w.buf = slices.Grow(c.w.buf, n+2)[:start+n]
		if !v.Valid(crc32c.CopyUpdate(0, c.w.buf[start:], v.Bytes)) {
			c.w.buf = c.w.buf[:mark]
			s.store.DropLease(k)
			return inPlaceNot, n, nil, nil
		}
		c.w.buf = append(c.w.buf, '\r', '\n')
		return inPlaceBuffered, n, nil, nil
	}
	if c.raw == nil {
		return inPlaceNot, n, nil, nil
	}
	// Send from segment memory, then check what was sent: the bytes must
	// not have changed while the kernel copied them (the lease still ran,
	// or the checksum still matches, which a reuse of the extent would
	// break). What the socket does not take at once is copied to a pooled
	// buffer (checked with the rest) and sent from there after the lock,
	// so the segment is read for the time of a memory copy, never for as
	// long as a slow client takes. The final CRLF goes out only after the
	// check, so a client never takes a value whose check failed: it sees
	// the connection close in the middle of the reply.
	rest, sent := c.sendNow(v.Bytes)
	switch {
	case !sent:
		s.pool.put(rest)
		return inPlaceFailed, n, nil, nil
	case !v.Valid(crc32c.Checksum(v.Bytes)):
		return inPlaceBad, n, rest, nil
	}
	return inPlaceSentOpen, n, rest, nil
}

// sendNow writes the buffered replies, b's bulk-string header and as much
// of b as the socket takes without waiting. It never waits for the
// client: what the socket did not take is left in the reply buffer (the
// buffered replies and header) and copied into a pooled buffer (the rest
// of b), returned for the caller to send after the key's lock (nil when
// all of b went). sent is false when the connection failed (c.w.err says
// why).
func (c *conn) sendNow(b []byte) (rest *buffer, sent bool) {
	w := &c.w
	w.prefixed('$', int64(len(b)))
	if w.err != nil {
		return nil, false
	}
	head := w.buf
	n, err := c.raw.writevNow([][]byte{head, b})
	if err != nil {
		w.err = err
		return nil, false
	}
	if n < len(head) {
		w.buf = w.buf[:copy(w.buf, head[n:])]
	} else {
		w.buf = w.buf[:0]
		b = b[n-len(head):]
		if len(b) > 0 {
			n, err := c.raw.writevNow([][]byte{b})
			if err != nil {
				w.err = err
				return nil, false
			}
			b = b[n:]
		}
	}
	if len(b) == 0 {
		return nil, true
	}
	rest = c.s.pool.get(len(b))
	copy(rest.b, b)
	return rest, true
}

// keyLock is the lock of key's shard. Every read of a key by this front
// end holds it shared, from asking for the replica list (or taking it
// from the SDK's lease cache) until the bytes are checked: for an
// in-place GET that spans the send (bounded: a memory copy, never a wait
// for the client). Whatever removes a key through this front end (SET
// that replaces, DEL, EXPIRE, PERSIST) holds it exclusively around the
// Remove. So the extent a read uses is not freed, and reused by the next
// put, under it, and a replica list granted before a removal is not put
// in the lease cache after it (the removal drops the cached one). Only a
// forced Remove by another SDK client can still pull an extent from
// under a read; the check after the send catches it.
func (s *Server) keyLock(key string) *sync.RWMutex {
	return &s.keyLocks[maphash.String(s.lockSeed, key)%uint64(len(s.keyLocks))]
}

// errSentBadValue ends a connection whose last reply carried bytes that
// failed their check after they were sent.
var errSentBadValue = errors.New("resp: a value sent failed its check afterwards")

// holdsInPlace reports whether key's stored value is val by comparing it
// with the segment memory it lies in. ok is false when the value is not in
// this process's segments (the caller reads it instead). Equality with
// the bytes being stored is the check here: the value's checksum was
// computed from the bytes its writer sent, so stored bytes equal to val
// are val's, whatever the checksum (it could differ only if memory had
// been corrupted into exactly val).
func (c *conn) holdsInPlace(key string, val []byte) (same, ok bool) {
	s := c.s
	l := s.keyLock(key)
	l.RLock()
	defer l.RUnlock()
	v, ok, err := s.store.View(s.ctx, key, s.cfg.Segments)
	if err != nil {
		return false, true
	}
	if !ok {
		return false, false
	}
	// Live: a key another client removed (forced) holds no value, even
	// where its bytes still lie.
	same = len(v.Bytes) == len(val) && bytes.Equal(v.Bytes, val) && v.Live()
	return same, true
}

// watchSet is the reader's watch hook (reader.watch): for a plain SET
// (no options) of a value of the size the key was last seen with, it
// returns the stored bytes in segment memory, so that the value is
// compared with them while it arrives, a chunk at a time while the chunk
// is in cache, instead of in one more pass after it arrived. The bytes are
// read without the key's lock (the client may be slow). On a TCP
// connection the watch is registered (watch.go: compared through a bounce
// buffer, its verdict final); otherwise receivedSame checks afterwards,
// under the lock, that they were the key's all along.
func (c *conn) watchSet(args [][]byte, nargs int64, dst []byte) *watchState {
	c.watched = client.View{}
	if nargs != 3 || len(args) != 2 || !bytes.EqualFold(args[0], []byte("set")) {
		return nil
	}
	s := c.s
	key := string(args[1])
	if n, ok := s.recent.get(key); !ok || n != len(dst) || !c.authed {
		return nil
	}
	l := s.keyLock(key)
	l.RLock()
	defer l.RUnlock()
	v, ok, err := s.store.View(s.ctx, key, s.cfg.Segments)
	if err != nil || !ok || len(v.Bytes) != len(dst) {
		return nil
	}
	w := &watchState{key: key, seg: v.Bytes, dst: dst, same: true}
	if until := v.Deadline.Add(-watchMargin); c.raw != nil && time.Now().Before(until) {
		// Registered under the key's lock: a removal either ran before
		// the View (which then found the new object or none) or keeps
		// this watch's prefix first.
		w.until = until
		s.watching.add(w)
		return w
	}
	c.watched, c.watchedKey = v, key
	return w
}

// receivedSame reports what comparing SET key val with the stored bytes
// while val arrived found: same (the key holds val: nothing to write),
// and whether it knows (false: no comparison ran, or the stored object may
// have changed under it; the caller compares again). Through the bounce
// buffer the verdict is final (readWatched). Otherwise the comparison
// holds when the key's replica list is still the one it used, under the
// same lease grant, still running: a removal of the key by this front end
// drops that list from the lease cache, so a View afterwards returns
// another.
func (c *conn) receivedSame(key string, val []byte) (same, known bool) {
	if c.r.bounced {
		if c.r.same && !c.s.holdsLive(key) {
			return false, true // removed meanwhile by another client: write it
		}
		if c.r.same {
			c.s.watchSame.Add(1)
		}
		return c.r.same, c.r.compared
	}
	w := c.watched
	c.watched = client.View{}
	if !c.r.compared || w.Bytes == nil || c.watchedKey != key || len(w.Bytes) != len(val) {
		return false, false
	}
	if !c.r.same {
		return false, true
	}
	s := c.s
	l := s.keyLock(key)
	l.RLock()
	defer l.RUnlock()
	v, ok, err := s.store.View(s.ctx, key, s.cfg.Segments)
	if err != nil || !ok || len(v.Bytes) != len(w.Bytes) || &v.Bytes[0] != &w.Bytes[0] ||
		v.CRC32C != w.CRC32C || v.HasChecksum != w.HasChecksum || !v.Deadline.Equal(w.Deadline) {
		return false, false
	}
	return v.Live(), true
}

// holdsLive reports whether key's object, as this front end sees it, is
// still stored: its view's lease runs and no other client removed it.
func (s *Server) holdsLive(key string) bool {
	l := s.keyLock(key)
	l.RLock()
	defer l.RUnlock()
	v, ok, err := s.store.View(s.ctx, key, s.cfg.Segments)
	return err == nil && ok && v.Live()
}

// suspectTTL is how long a key whose in-place GET failed its check after
// sending is read through the copying path (which checks before sending
// and answers a miss for bad bytes), so that a corrupted value makes one
// connection close, not every GET of it.
const (
	suspectTTL = time.Minute
	maxSuspect = 1024
)

// suspectSet is the keys read through the copying path for a while.
type suspectSet struct {
	n  atomic.Int32 // len(m), read without the lock on every GET
	mu sync.Mutex
	// guarded by mu:
	m map[string]time.Time // key -> until
}

func (t *suspectSet) add(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]time.Time{}
	}
	if len(t.m) >= maxSuspect {
		clear(t.m)
	}
	t.m[key] = time.Now().Add(suspectTTL)
	t.n.Store(int32(len(t.m)))
}

// drop forgets key: it holds a value stored or checked since.
func (t *suspectSet) drop(key string) {
	if t.n.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
	t.n.Store(int32(len(t.m)))
}

func (t *suspectSet) has(key string) bool {
	if t.n.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.m[key]
	if ok && time.Now().After(until) {
		delete(t.m, key)
		t.n.Store(int32(len(t.m)))
		return false
	}
	return ok
}
