package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Parser limits. They match redis-server's defaults where it has one.
const (
	// maxArgs is the most elements a command array may have.
	maxArgs = 1 << 20
	// bigArg: bulk strings at least this long are read straight from the
	// socket into a pooled value buffer; shorter ones into the reader's
	// arena (one copy out of the bufio buffer, cheap at this size).
	bigArg = 16 << 10
	// maxArena: an arena grown past this by one command is dropped after
	// it, so that one MSET of many small values does not pin its memory.
	maxArena = 1 << 20
)

// errProtocol is a malformed request. The connection is answered with
// "-ERR Protocol error: ..." and closed, as redis-server does: after a
// framing error the rest of the stream cannot be trusted.
type errProtocol struct{ msg string }

func (e *errProtocol) Error() string { return "Protocol error: " + e.msg }

func protoErr(format string, args ...any) error {
	return &errProtocol{msg: fmt.Sprintf(format, args...)}
}

// reader parses requests: RESP arrays of bulk strings (what every client
// library and redis-cli --pipe send) and inline commands (a line of
// space-separated words, what telnet and redis-cli's simple mode send).
type reader struct {
	br      *bufio.Reader
	src     io.Reader // what br reads
	maxBulk int
	pool    *bufPool

	args  [][]byte  // the current command; valid until the next call to next
	arena []byte    // backing store of short arguments
	bigs  []*buffer // pooled buffers of long arguments, given back by release

	// watch, when set, is asked before a long argument is read, with the
	// arguments read so far, the array's length and the argument's buffer,
	// for the stored bytes to compare it with as it arrives (nil: none;
	// watch.go). compared and same are the outcome, for the current
	// command; lost: the argument's bytes could not all be kept (its
	// command must fail); bounced: the comparison was made through the
	// bounce buffer and its verdict is final (readWatched).
	watch    func(args [][]byte, nargs int64, dst []byte) *watchState
	compared bool
	same     bool
	lost     bool
	bounced  bool
	cur      *watchState // the current command's watch, ended by release
	crlf     [2]byte     // a bulk string's terminator, read by next
}

func newReader(r io.Reader, size, maxBulk int, pool *bufPool) *reader {
	return &reader{br: bufio.NewReaderSize(r, size), src: r, maxBulk: maxBulk, pool: pool}
}

// release gives back the pooled buffers of the current command.
func (r *reader) release() {
	if r.cur != nil {
		r.cur.end()
		r.cur = nil
	}
	for i, b := range r.bigs {
		r.pool.put(b)
		r.bigs[i] = nil
	}
	r.bigs = r.bigs[:0]
}

// next reads one command. An empty command (blank inline line, "*0") is
// returned as no arguments. Its arguments stay valid until the next call
// to next or release.
func (r *reader) next() ([][]byte, error) {
	r.release()
	r.args = r.args[:0]
	r.compared, r.same, r.lost, r.bounced = false, false, false, false
	if cap(r.arena) > maxArena {
		r.arena = nil
	}
	r.arena = r.arena[:0]
	line, err := r.line()
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		return r.inline(line)
	}
	n, ok := parseInt(line[1:])
	if !ok || n > maxArgs {
		return nil, protoErr("invalid multibulk length")
	}
	for i := int64(0); i < n; i++ {
		line, err := r.line()
		if err != nil {
			return nil, eof(err)
		}
		if len(line) == 0 || line[0] != '$' {
			c := byte(' ')
			if len(line) > 0 {
				c = line[0]
			}
			return nil, protoErr("expected '$', got '%c'", c)
		}
		l, ok := parseInt(line[1:])
		if !ok || l < 0 || l > int64(r.maxBulk) {
			return nil, protoErr("invalid bulk length")
		}
		dst := r.alloc(int(l))
		var w *watchState
		if r.watch != nil && len(dst) >= bigArg {
			w = r.watch(r.args, n, dst)
			r.cur = w
		}
		if err := r.readArg(dst, w); err != nil {
			return nil, eof(err)
		}
		if _, err := io.ReadFull(r.br, r.crlf[:]); err != nil { // a field: a local would escape to the heap
			return nil, eof(err)
		}
		if r.crlf != [2]byte{'\r', '\n'} {
			return nil, protoErr("bulk string not terminated by CRLF")
		}
		r.args = append(r.args, dst)
	}
	return r.args, nil
}

// cmpChunk is how much of a watched argument is read before it is
// compared: small enough that the bytes are still in cache.
const cmpChunk = 128 << 10

// readArg reads len(dst) bytes of an argument. With w it compares them
// with w.seg as they arrive and records whether all were equal
// (compared, same): through the bounce buffer when w is registered and
// the source reads long arguments itself (readWatched), else in dst.
func (r *reader) readArg(dst []byte, w *watchState) error {
	lr, long := r.src.(longReader)
	switch {
	case long && w != nil && w.table != nil:
		r.bounced = true
		return r.readWatched(lr, w)
	case long && w == nil && len(dst) >= bigArg:
		return r.readLong(lr, dst)
	case w == nil:
		_, err := io.ReadFull(r.br, dst)
		return err
	}
	w.end()
	cmp := w.seg
	same := true
	for off := 0; off < len(dst); {
		end := min(off+cmpChunk, len(dst))
		if _, err := io.ReadFull(r.br, dst[off:end]); err != nil {
			return err
		}
		same = same && bytes.Equal(dst[off:end], cmp[off:end])
		off = end
	}
	r.compared, r.same = true, same
	return nil
}

// readLong reads a long argument: what the read buffer holds, then
// straight from the socket in reads as large as what is left.
func (r *reader) readLong(lr longReader, dst []byte) error {
	defer lr.endLong()
	off := 0
	for off < len(dst) && r.br.Buffered() > 0 {
		n, _ := r.br.Read(dst[off:])
		off += n
	}
	for off < len(dst) {
		n, err := lr.readLong(dst[off:], time.Time{})
		off += n
		if err != nil && off < len(dst) {
			return err
		}
	}
	return nil
}

// alloc returns room for an argument of n bytes: a pooled buffer for long
// ones (io.ReadFull into it reads straight from the socket once bufio's
// buffered bytes are used up), else a piece of the arena.
func (r *reader) alloc(n int) []byte {
	if n >= bigArg {
		b := r.pool.get(n)
		r.bigs = append(r.bigs, b)
		return b.b
	}
	if cap(r.arena)-len(r.arena) < n {
		// Earlier arguments keep the old arena alive; the new one serves
		// the rest of this command and the next ones.
		r.arena = make([]byte, 0, max(4096, 2*cap(r.arena), n))
	}
	s := len(r.arena)
	r.arena = r.arena[:s+n]
	return r.arena[s : s+n : s+n]
}

// line reads one line and returns it without its line ending. A line
// longer than the read buffer is a protocol error (request headers are
// short; an inline command that long is refused like redis-server does).
func (r *reader) line() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, protoErr("too big inline request")
	}
	if err != nil {
		if len(b) > 0 && err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b, nil
}

func eof(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// inline splits a line into arguments the way redis-server's sdssplitargs
// does: spaces separate, "double quotes" take \n \r \t \b \a \\ \" and
// \xHH escapes, 'single quotes' take \'. A closing quote must be followed
// by a space or the end of the line.
func (r *reader) inline(line []byte) ([][]byte, error) {
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return r.args, nil
		}
		var arg []byte
		switch line[i] {
		case '"':
			i++
			for {
				if i == len(line) {
					return nil, protoErr("unbalanced quotes in request")
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) {
					i++
					switch line[i] {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					case 'x':
						if i+2 < len(line) && isHex(line[i+1]) && isHex(line[i+2]) {
							c = unhex(line[i+1])<<4 | unhex(line[i+2])
							i += 2
						} else {
							c = 'x'
						}
					default:
						c = line[i]
					}
				}
				arg = append(arg, c)
				i++
			}
			if i < len(line) && !isSpace(line[i]) {
				return nil, protoErr("unbalanced quotes in request")
			}
		case '\'':
			i++
			for {
				if i == len(line) {
					return nil, protoErr("unbalanced quotes in request")
				}
				c := line[i]
				if c == '\'' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					c = '\''
				}
				arg = append(arg, c)
				i++
			}
			if i < len(line) && !isSpace(line[i]) {
				return nil, protoErr("unbalanced quotes in request")
			}
		default:
			s := i
			for i < len(line) && !isSpace(line[i]) {
				i++
			}
			arg = line[s:i]
		}
		// The line lives in bufio's buffer: copy the argument out.
		dst := r.alloc(len(arg))
		copy(dst, arg)
		r.args = append(r.args, dst)
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// parseInt parses a decimal integer as redis-server's string2ll does: an
// optional '-', digits, no '+', no leading zeros except "0", no spaces, no
// overflow.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<63-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if neg {
		return -int64(n), true // n ≤ 2^63 (the check above), so -2^63 is reachable
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// Reply buffering.
const (
	// flushAt: buffered replies are written once they reach this much
	// (a long pipeline), else when no request is waiting (serveConn).
	flushAt = 64 << 10
	// bigBulk: a bulk string this long is not copied into the reply
	// buffer; it goes out with one writev beside the buffered replies,
	// straight from the value buffer.
	bigBulk = 16 << 10
	// maxWriteBuf: a reply buffer grown past this is dropped after a flush.
	maxWriteBuf = 1 << 20
)

var crlf = []byte("\r\n")

// writer encodes replies in RESP2 or RESP3 and buffers them for the
// connection. A write error is kept: later replies are dropped and the
// connection's loop ends at its next flush.
type writer struct {
	nc    io.Writer // buffered replies
	vc    io.Writer // long bulk strings, by writev (net.Buffers); nil: nc
	buf   []byte
	proto int // 2 or 3
	err   error
	vec   [3][]byte // writev of a big bulk string: buffered replies, value, CRLF
}

// flush writes the buffered replies.
func (w *writer) flush() error {
	if len(w.buf) > 0 && w.err == nil {
		_, w.err = w.nc.Write(w.buf)
	}
	if cap(w.buf) > maxWriteBuf {
		w.buf = nil
	}
	w.buf = w.buf[:0]
	return w.err
}

func (w *writer) vectored() io.Writer {
	if w.vc != nil {
		return w.vc
	}
	return w.nc
}

func (w *writer) grown() {
	if len(w.buf) >= flushAt {
		_ = w.flush()
	}
}

func (w *writer) prefixed(p byte, n int64) {
	w.buf = append(w.buf, p)
	w.buf = strconv.AppendInt(w.buf, n, 10)
	w.buf = append(w.buf, '\r', '\n')
}

// simple writes a status reply (+OK). s must not contain CR or LF.
func (w *writer) simple(s string) {
	w.buf = append(w.buf, '+')
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '\r', '\n')
	w.grown()
}

// error writes an error reply; msg starts with its code word (ERR,
// NOSPACE, WRONGPASS...). CR and LF in msg become spaces: an error reply
// is one line.
func (w *writer) error(msg string) {
	w.buf = append(w.buf, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		w.buf = append(w.buf, c)
	}
	w.buf = append(w.buf, '\r', '\n')
	w.grown()
}

func (w *writer) int(n int64) { w.prefixed(':', n); w.grown() }

// bulk writes a bulk string. A long one is written at once, in one
// writev with the replies buffered before it: the value is copied once,
// from its buffer into the kernel.
func (w *writer) bulk(b []byte) {
	w.prefixed('$', int64(len(b)))
	if len(b) < bigBulk {
		w.buf = append(w.buf, b...)
		w.buf = append(w.buf, '\r', '\n')
		w.grown()
		return
	}
	if w.err == nil {
		w.vec = [3][]byte{w.buf, b, crlf}
		bufs := net.Buffers(w.vec[:])
		_, w.err = bufs.WriteTo(w.vectored())
		w.vec = [3][]byte{}
	}
	w.buf = w.buf[:0]
}

func (w *writer) bulkString(s string) {
	w.prefixed('$', int64(len(s)))
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '\r', '\n')
	w.grown()
}

// null is RESP2's null bulk string or RESP3's null.
func (w *writer) null() {
	if w.proto == 3 {
		w.buf = append(w.buf, "_\r\n"...)
	} else {
		w.buf = append(w.buf, "$-1\r\n"...)
	}
	w.grown()
}

func (w *writer) array(n int) { w.prefixed('*', int64(n)) }

// mapOf announces n key/value pairs: a RESP3 map, or a flat RESP2 array.
func (w *writer) mapOf(n int) {
	if w.proto == 3 {
		w.prefixed('%', int64(n))
		return
	}
	w.array(2 * n)
}

// What scan found at the start of the read buffer.
const (
	scanPartial = iota // the command is not complete yet
	scanReady          // a whole command, or a malformed one next reports without reading further
	scanBig            // a command with an argument of bigArg bytes or more
)

// scan tells the event loop (loop_linux.go) whether b, the unread bytes
// of the read buffer, begins with a command next can parse without
// reading the socket (it must never wait there). It follows next's
// grammar: an inline line, or an array header and its bulk strings.
func scan(b []byte, maxBulk int) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return scanPartial
	}
	if b[0] != '*' {
		return scanReady
	}
	n, ok := parseInt(trimCR(b[1:i]))
	if !ok || n > maxArgs {
		return scanReady
	}
	off := i + 1
	for k := int64(0); k < n; k++ {
		j := bytes.IndexByte(b[off:], '\n')
		if j < 0 {
			return scanPartial
		}
		line := trimCR(b[off : off+j])
		if len(line) == 0 || line[0] != '$' {
			return scanReady
		}
		l, ok := parseInt(line[1:])
		if !ok || l < 0 || l > int64(maxBulk) {
			return scanReady
		}
		if l >= bigArg {
			return scanBig
		}
		off += j + 1
		if int64(len(b)-off) < l+2 {
			return scanPartial
		}
		off += int(l) + 2
	}
	return scanReady
}

func trimCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}
