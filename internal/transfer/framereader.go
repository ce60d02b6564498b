package transfer

import (
	"fmt"
	"io"
	"net"

	"github.com/kvtier/kvtier/internal/grant"
)

// frameHeadMax is the longest request head: the header, a name and a
// grant. A READ frame (a get) is nothing else.
const frameHeadMax = requestHeaderLen + MaxNameLen + grant.Size

// frameReader is the serving side's reader of one connection. A frame's
// first read asks for up to frameHeadMax bytes, so a get's header, name
// and grant arrive in one syscall instead of two, and a put's header and
// descriptors likewise. What that read took past the head (the start of
// a payload, or of the next pipelined frame) is served first by the reads
// that follow, so payload readers read through the frameReader, never
// from the connection directly.
type frameReader struct {
	nc   net.Conn
	buf  [frameHeadMax]byte
	r, w int // buf[r:w] was read from nc and not consumed yet
}

// Read reads what is buffered, or else from the connection.
func (f *frameReader) Read(p []byte) (int, error) {
	if f.r < f.w {
		n := copy(p, f.buf[f.r:f.w])
		f.r += n
		return n, nil
	}
	return f.nc.Read(p)
}

// buffered counts the bytes read and not consumed.
func (f *frameReader) buffered() int { return f.w - f.r }

// start begins a frame: the bytes still buffered move to the buffer's
// front, so the frame's head fits (fill). Slices take returned for the
// previous frame are overwritten.
func (f *frameReader) start() {
	if f.r == 0 {
		return
	}
	f.w = copy(f.buf[:], f.buf[f.r:f.w])
	f.r = 0
}

// readSome makes one Read from the connection into the buffer's free
// space: the read a frame waits on while the connection is idle.
func (f *frameReader) readSome() error {
	n, err := f.nc.Read(f.buf[f.w:])
	f.w += n
	if n > 0 {
		return nil // an error comes back at the next read
	}
	return err
}

// fill reads until n bytes after the consumed ones are buffered. Since
// start, r+n <= frameHeadMax holds for a frame's head (parseRequestHeader
// bounds the name); more is refused rather than read with no room.
func (f *frameReader) fill(n int) error {
	if f.r+n > len(f.buf) {
		return fmt.Errorf("%w: frame head of %d bytes past %d", errMalformed, f.r+n, len(f.buf))
	}
	for f.w-f.r < n {
		m, err := f.nc.Read(f.buf[f.w:])
		f.w += m
		if f.w-f.r >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// take consumes n buffered bytes (fill made them so) and returns them;
// they stay valid until the next start.
func (f *frameReader) take(n int) []byte {
	b := f.buf[f.r : f.r+n]
	f.r += n
	return b
}
