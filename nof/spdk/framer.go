package spdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// DefaultMaxValue is the largest single JSON value the Framer accepts by
// default: SPDK's reply buffer limit (SPDK_JSONRPC_SEND_BUF_SIZE_MAX, 32 MiB).
const DefaultMaxValue = 32 << 20

// Framer splits SPDK's RPC byte stream (back-to-back JSON values, no length
// prefix, optional whitespace between them) into whole values. It finds value
// boundaries by bracket depth outside strings, so it never needs more than one
// pass over a byte however the stream is split into reads. It accepts only
// objects and arrays at top level (SPDK sends nothing else); anything else is
// a framing error, after which the Framer stays failed (there is no
// resynchronisation point in such a stream). Validity of a framed value's
// contents is checked by whoever decodes it.
//
// A Framer is not safe for concurrent use.
type Framer struct {
	// Max is the largest value in bytes; 0 means DefaultMaxValue.
	Max int

	buf   []byte
	pos   int // next byte of buf to scan
	start int // offset of the current value's first byte, -1 between values
	depth int
	inStr bool
	esc   bool
	err   error
}

// NewFramer returns an empty Framer with the given limit (0 = default).
func NewFramer(max int) *Framer { return &Framer{Max: max, start: -1} }

// Feed appends bytes read from the stream.
func (f *Framer) Feed(p []byte) {
	if f.err != nil {
		return
	}
	f.buf = append(f.buf, p...)
}

// Buffered returns how many fed bytes have not been returned as values yet.
func (f *Framer) Buffered() int { return len(f.buf) }

// Next returns the next complete value (a fresh copy), or (nil, nil) when more
// bytes are needed, or an error wrapping ErrFraming.
func (f *Framer) Next() ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	max := f.Max
	if max <= 0 {
		max = DefaultMaxValue
	}
	for i := f.pos; i < len(f.buf); i++ {
		c := f.buf[i]
		if f.start < 0 {
			switch c {
			case ' ', '\t', '\n', '\r':
				continue
			case '{', '[':
				f.start, f.depth = i, 1
				continue
			default:
				return nil, f.fail(fmt.Errorf("%w: unexpected byte %q between values", ErrFraming, c))
			}
		}
		if i-f.start+1 > max {
			return nil, f.fail(fmt.Errorf("%w: value longer than %d bytes", ErrFraming, max))
		}
		if f.inStr {
			switch {
			case f.esc:
				f.esc = false
			case c == '\\':
				f.esc = true
			case c == '"':
				f.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			f.inStr = true
		case '{', '[':
			f.depth++
		case '}', ']':
			f.depth--
			if f.depth == 0 {
				v := bytes.Clone(f.buf[f.start : i+1])
				n := copy(f.buf, f.buf[i+1:])
				f.buf = f.buf[:n]
				f.pos, f.start = 0, -1
				return v, nil
			}
		}
	}
	if f.start < 0 {
		// Only whitespace is buffered: drop it.
		f.buf = f.buf[:0]
		f.pos = 0
		return nil, nil
	}
	if len(f.buf)-f.start > max {
		return nil, f.fail(fmt.Errorf("%w: value longer than %d bytes", ErrFraming, max))
	}
	f.pos = len(f.buf)
	return nil, nil
}

func (f *Framer) fail(err error) error {
	f.err = err
	f.buf = nil
	return err
}

// idKind says what a reply's id was.
type idKind uint8

const (
	idNumber idKind = iota // a non-negative integer that fits uint64: ours
	idNull                 // null or absent: an error for a request SPDK could not attribute
	idOther                // a string, negative or fractional number: not one of ours
)

// Reply is one decoded JSON-RPC response object.
type Reply struct {
	ID     uint64          // valid when the id was a non-negative integer
	kind   idKind          //
	RawID  json.RawMessage // the id token as received ("null" when absent)
	Result json.RawMessage // nil when the reply is an error
	Err    *RPCError       // nil on success
}

// HasNumericID reports whether the reply's id is an integer id this client
// could have sent.
func (r *Reply) HasNumericID() bool { return r.kind == idNumber }

// HasNullID reports whether the reply's id was null or absent.
func (r *Reply) HasNullID() bool { return r.kind == idNull }

// DecodeReplies decodes one framed value: a response object, or a batch
// response array of objects. An element that is not a valid response is
// reported as an error; the whole value is rejected then, since a peer that
// sends malformed responses cannot be trusted to have matched ids either.
func DecodeReplies(v []byte) ([]Reply, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty value", ErrBadReply)
	}
	if v[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return nil, fmt.Errorf("%w: batch: %v", ErrBadReply, err)
		}
		if len(elems) == 0 {
			return nil, fmt.Errorf("%w: empty batch response", ErrBadReply)
		}
		out := make([]Reply, 0, len(elems))
		for i, e := range elems {
			r, err := decodeReply(e)
			if err != nil {
				return nil, fmt.Errorf("batch element %d: %w", i, err)
			}
			out = append(out, r)
		}
		return out, nil
	}
	r, err := decodeReply(v)
	if err != nil {
		return nil, err
	}
	return []Reply{r}, nil
}

func decodeReply(v []byte) (Reply, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil || m == nil {
		return Reply{}, fmt.Errorf("%w: not a JSON object", ErrBadReply)
	}
	var r Reply
	if ver, ok := m["jsonrpc"]; ok {
		var s string
		if json.Unmarshal(ver, &s) != nil || s != "2.0" {
			return Reply{}, fmt.Errorf("%w: jsonrpc member %s", ErrBadReply, ver)
		}
	}
	r.RawID = m["id"]
	r.kind, r.ID = classifyID(r.RawID)
	res, hasRes := m["result"]
	eobj, hasErr := m["error"]
	if hasErr && string(eobj) == "null" {
		hasErr = false
	}
	switch {
	case hasRes && hasErr:
		return Reply{}, fmt.Errorf("%w: both result and error", ErrBadReply)
	case hasErr:
		var we struct {
			Code    *int            `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(eobj, &we); err != nil || we.Code == nil {
			return Reply{}, fmt.Errorf("%w: error member %.64s", ErrBadReply, eobj)
		}
		r.Err = &RPCError{Code: *we.Code, Message: we.Message}
		if len(we.Data) > 0 {
			r.Err.Data = bytes.Clone(we.Data)
		}
	case hasRes:
		r.Result = res
	default:
		return Reply{}, fmt.Errorf("%w: neither result nor error", ErrBadReply)
	}
	return r, nil
}

func classifyID(raw json.RawMessage) (idKind, uint64) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return idNull, 0
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return idNumber, n
	}
	return idOther, 0
}
