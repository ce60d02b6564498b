package spdktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/kvtier/kvtier/nof/spdk"
)

// HandlerFunc answers one request: a raw result, or an error object. params
// is nil when the request had none.
type HandlerFunc func(method string, params json.RawMessage) (json.RawMessage, *spdk.RPCError)

// Options shape how the Server puts replies on the wire, to exercise a
// client's framing and id matching. The zero value writes each reply whole,
// in completion (= arrival) order, as SPDK does for synchronous handlers.
type Options struct {
	// Chunk > 0 writes every reply in pieces of Chunk bytes, pausing briefly
	// between pieces, so the client sees replies split across reads.
	Chunk int
	// Hold > 1 keeps replies back until Hold of them are queued on the
	// connection, then sends those Hold in reverse order in one write: replies out
	// of order and several per read (SPDK sends in completion order, and
	// asynchronous handlers complete out of order).
	Hold int
	// CloseOn names a method on whose arrival the server closes the
	// connection without replying, dropping queued replies (what SPDK does
	// after a parse error: recordings 39 and 41).
	CloseOn string
	// Override maps a method to bytes written verbatim instead of the
	// handler's reply (e.g. a recorded reply with a null or foreign id).
	Override map[string][]byte
}

// Server is a JSON-RPC server on a real Unix stream socket that follows
// SPDK's request rules (lib/jsonrpc, see doc.go) and answers through a
// HandlerFunc.
type Server struct {
	path string
	ln   net.Listener
	h    HandlerFunc
	opts Options
	wg   sync.WaitGroup

	mu sync.Mutex
	// guarded by mu:
	conns    map[net.Conn]struct{}
	received [][]byte // every framed request value, in arrival order
	closed   bool
}

// Listen starts a Server on the Unix socket path (removing a stale socket
// file first).
func Listen(path string, h HandlerFunc, opts Options) (*Server, error) {
	if h == nil {
		return nil, errors.New("spdktest: nil handler")
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	s := &Server{path: path, ln: ln, h: h, opts: opts, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Path is the socket path.
func (s *Server) Path() string { return s.path }

// Received returns copies of the request values received so far.
func (s *Server) Received() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.received))
	for i, r := range s.received {
		out[i] = bytes.Clone(r)
	}
	return out
}

// DropConns closes every open connection (as if SPDK dropped its clients);
// the listener keeps accepting.
func (s *Server) DropConns() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

// Close stops the listener, closes all connections and waits for the
// server's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.ln.Close()
	s.DropConns()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	f := spdk.NewFramer(256 << 10) // SPDK_JSONRPC_RECV_BUF_SIZE
	buf := make([]byte, 64<<10)
	var held [][]byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			f.Feed(buf[:n])
			var out [][]byte
			for {
				v, ferr := f.Next()
				if ferr != nil {
					return // parse error: close at once, nothing is sent
				}
				if v == nil {
					break
				}
				s.mu.Lock()
				s.received = append(s.received, v)
				s.mu.Unlock()
				if !json.Valid(v) {
					return // SPDK queues -32700 but the close wins: nothing arrives
				}
				m := methodOf(v)
				if s.opts.CloseOn != "" && m == s.opts.CloseOn {
					return
				}
				if raw, ok := s.opts.Override[m]; ok {
					out = append(out, raw)
					continue
				}
				if r := s.handleValue(v); r != nil {
					out = append(out, r)
				}
			}
			if s.opts.Hold > 1 {
				held = append(held, out...)
				out = nil
				for len(held) >= s.opts.Hold {
					group := slices.Clone(held[:s.opts.Hold])
					held = held[s.opts.Hold:]
					slices.Reverse(group)
					out = append(out, bytes.Join(group, nil))
				}
			}
			for _, r := range out {
				if s.write(c, r) != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *Server) write(c net.Conn, b []byte) error {
	if s.opts.Chunk <= 0 {
		_, err := c.Write(b)
		return err
	}
	for len(b) > 0 {
		n := min(s.opts.Chunk, len(b))
		if _, err := c.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		runtime.Gosched() // let the reader see the piece on its own
	}
	return nil
}

func methodOf(v []byte) string {
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(v, &m) != nil {
		return ""
	}
	return m.Method
}

// handleValue answers one framed request value (object or batch array);
// nil means nothing is sent. Replies end with "\n" as SPDK's do.
func (s *Server) handleValue(v []byte) []byte {
	v = bytes.TrimSpace(v)
	if v[0] == '[' {
		var elems []json.RawMessage
		if json.Unmarshal(v, &elems) != nil || len(elems) == 0 {
			return append(errorReply(nil, spdk.CodeInvalidRequest, "Invalid request"), '\n')
		}
		var parts [][]byte
		for _, e := range elems {
			if r := s.handleObject(e); r != nil {
				parts = append(parts, r)
			}
		}
		if len(parts) == 0 {
			return nil
		}
		out := []byte{'['}
		out = append(out, bytes.Join(parts, []byte{','})...)
		return append(out, ']', '\n')
	}
	r := s.handleObject(v)
	if r == nil {
		return nil
	}
	return append(r, '\n')
}

// handleObject applies SPDK's request checks (jsonrpc_parse_request) and
// calls the handler. Returns nil for a notification that succeeded.
func (s *Server) handleObject(v []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || m == nil {
		return errorReply(nil, spdk.CodeInvalidRequest, "Invalid request")
	}
	for k := range m {
		switch k {
		case "jsonrpc", "method", "params", "id":
		default:
			return errorReply(nil, spdk.CodeInvalidRequest, "Invalid request")
		}
	}
	if ver, ok := m["jsonrpc"]; ok {
		var sv string
		if json.Unmarshal(ver, &sv) != nil || sv != "2.0" {
			return errorReply(nil, spdk.CodeInvalidRequest, "Invalid request")
		}
	}
	id, hasID := m["id"]
	if hasID {
		switch t := bytes.TrimSpace(id); {
		case string(t) == "null":
			hasID, id = false, nil
		case len(t) > 0 && (t[0] == '"' || t[0] == '-' || (t[0] >= '0' && t[0] <= '9')):
			id = t
		default:
			return errorReply(nil, spdk.CodeInvalidRequest, "Invalid request")
		}
	}
	var method string
	if json.Unmarshal(m["method"], &method) != nil || method == "" {
		return errorReply(nil, spdk.CodeInvalidRequest, "Invalid request")
	}
	params := m["params"]
	if t := bytes.TrimSpace(params); len(t) > 0 {
		if string(t) == "null" {
			params = nil
		} else if t[0] != '{' && t[0] != '[' {
			return errorReply(id, spdk.CodeInvalidRequest, "Invalid request")
		}
	}
	res, rerr := s.h(method, params)
	if rerr != nil {
		return errorReply(id, rerr.Code, rerr.Message)
	}
	if !hasID {
		return nil // a notification's success is dropped (spdk_jsonrpc_end_result)
	}
	out := []byte(`{"jsonrpc":"2.0","id":`)
	out = append(out, id...)
	out = append(out, `,"result":`...)
	out = append(out, res...)
	return append(out, '}')
}

func errorReply(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	out := []byte(`{"jsonrpc":"2.0","id":`)
	out = append(out, id...)
	out = append(out, fmt.Sprintf(`,"error":{"code":%d,"message":`, code)...)
	out = append(out, jsonString(msg)...)
	return append(out, `}}`...)
}

// jsonString encodes s as SPDK's writer does (no HTML escaping).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}
