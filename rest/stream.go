package rest

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/kverr"
)

// ObjectStreamer is the optional capability of a DataPlane that reads an
// object in ranges (found by type assertion). With it GET
// objects/{key}/data holds one chunk per request instead of the whole
// object; without it the object is read whole (Get).
type ObjectStreamer interface {
	OpenObject(ctx context.Context, tenant, key string) (ObjectStream, error)
}

// ObjectStream reads one object: its size and checksum known up front,
// then ranges at offsets that are multiples of StreamChunk.
type ObjectStream interface {
	Size() uint64
	Checksum() (crc uint32, ok bool)
	ReadAt(ctx context.Context, p []byte, off uint64) error
}

// StreamChunk is how much of an object one GET holds at a time.
const StreamChunk = 1 << 20

// DefaultDataWriteTimeout is Config.DataWriteTimeout when zero.
const DefaultDataWriteTimeout = 30 * time.Second

// streamObject answers GET objects/{key}/data in StreamChunk pieces, each
// read through the data plane, added to the running CRC32C and written
// under a write deadline (a reader that does not take a chunk in time is
// cut off). Errors before the first byte are ordinary error responses.
// Afterwards the status is sent, so a failure can only abort the
// connection: a read error, or a checksum that does not match once every
// byte was read. The last chunk is held back until the checksum matched,
// so a client never sees wrong bytes with a clean end: it sees a response
// shorter than its Content-Length (a truncated body), never a complete one
// that is wrong.
func (s *Server) streamObject(c echo.Context, sp ObjectStreamer, tenant, key string) error {
	octx, cancel := s.ctx(c)
	st, err := sp.OpenObject(octx, tenant, key)
	cancel()
	if err != nil {
		return err
	}
	size := st.Size()
	want, hasCRC := st.Checksum()
	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "application/octet-stream")
	h.Set(echo.HeaderContentLength, strconv.FormatUint(size, 10))
	if hasCRC {
		h.Set("X-Kvtier-Crc32c", strconv.FormatUint(uint64(want), 10))
	}
	buf := make([]byte, min(size, StreamChunk))
	rc := http.NewResponseController(w.Writer)
	var crc uint32
	started := false
	for off := uint64(0); off < size; {
		n := min(size-off, StreamChunk)
		rctx, cancel := s.ctx(c)
		err := st.ReadAt(rctx, buf[:n], off)
		cancel()
		if err != nil {
			if !started {
				return err // nothing sent yet: an ordinary error response
			}
			s.log.Warn("object stream aborted: read failed", "key", printable(key), "offset", off, "err", err)
			panic(http.ErrAbortHandler)
		}
		crc = crc32c.Update(crc, buf[:n])
		if off+n == size && hasCRC && crc != want {
			s.log.Warn("object stream aborted: checksum mismatch", "key", printable(key), "want", want, "got", crc)
			if !started {
				return kverr.New(kverr.ChecksumMismatch, key, "read bytes have CRC32C %08x, the object %08x", crc, want)
			}
			panic(http.ErrAbortHandler) // the client sees a truncated body
		}
		if !started {
			w.WriteHeader(http.StatusOK)
			started = true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.DataWriteTimeout))
		if _, err := w.Write(buf[:n]); err != nil {
			return nil // the client went away or stalled past the deadline
		}
		s.met.AddTransferBytes("rest_get", int(n))
		off += n
	}
	if !started {
		w.WriteHeader(http.StatusOK) // an empty object
	}
	_ = rc.SetWriteDeadline(time.Time{})
	return nil
}
