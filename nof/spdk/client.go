package spdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// DefaultSocket is SPDK's default RPC listen address (SPDK_DEFAULT_RPC_ADDR).
const DefaultSocket = "/var/tmp/spdk.sock"

// DefaultCallTimeout bounds a call whose context has no deadline; it is the
// timeout of SPDK's own Python client.
const DefaultCallTimeout = 60 * time.Second

// Config configures a Client. The zero value means: DefaultSocket, 60 s per
// call, 32 MiB per reply.
type Config struct {
	// Socket is the path of SPDK's Unix stream socket.
	Socket string
	// CallTimeout bounds a call whose ctx has no deadline. 0 = default;
	// negative = no bound (the ctx alone decides).
	CallTimeout time.Duration
	// MaxReply is the largest reply value accepted; 0 = DefaultMaxValue.
	MaxReply int
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.MaxReply < 0 {
		return kverr.New(kverr.InvalidParams, "", "spdk: MaxReply %d < 0", c.MaxReply)
	}
	if len(c.Socket) > 107 {
		return kverr.New(kverr.InvalidParams, "", "spdk: socket path longer than 107 bytes: %q", c.Socket)
	}
	return nil
}

func (c Config) socket() string {
	if c.Socket == "" {
		return DefaultSocket
	}
	return c.Socket
}

// Caller is the one method the typed wrappers and the Manager need; tests
// and other packages may substitute their own.
type Caller interface {
	Call(ctx context.Context, method string, params, result any) error
}

var _ Caller = (*Client)(nil)

// Client is a JSON-RPC 2.0 client for one SPDK application. It is safe for
// concurrent use: any number of calls may be outstanding on its one
// connection; replies are matched by id in whatever order SPDK completes
// them. A broken connection fails the calls outstanding on it with
// ErrConnLost and is replaced by a fresh one on the next call.
type Client struct {
	cfg     Config
	nextID  atomic.Uint64
	calls   atomic.Uint64
	orphans atomic.Uint64
	late    atomic.Uint64
	redials atomic.Uint64

	mu sync.Mutex
	// guarded by mu:
	cur     *conn         // current connection, nil before the first call
	dialing chan struct{} // non-nil while a dial runs; closed when it ends
	closed  bool
}

// conn is one socket with its reader goroutine.
type conn struct {
	nc   net.Conn
	done chan struct{} // closed when the reader goroutine has exited
	wmu  sync.Mutex    // serialises whole-request writes

	mu sync.Mutex
	// guarded by mu:
	pending map[uint64]chan outcome
	err     error // non-nil once the connection is dead
}

type outcome struct {
	r   Reply
	err error
}

// New returns a Client for cfg. It does not connect; the first call does.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg}, nil
}

// Dial returns a Client connected to the socket at path ("" = DefaultSocket).
func Dial(ctx context.Context, path string) (*Client, error) {
	c, err := New(Config{Socket: path})
	if err != nil {
		return nil, err
	}
	if _, err := c.getConn(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Stats are counters of the client's life, for tests and metrics.
type Stats struct {
	Calls       uint64 // requests written
	LateReplies uint64 // replies whose id no call waits for (caller gave up)
	Orphans     uint64 // replies with a null/foreign id that could not be attributed
	Reconnects  uint64 // connections opened after the first
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	return Stats{Calls: c.calls.Load(), LateReplies: c.late.Load(),
		Orphans: c.orphans.Load(), Reconnects: c.redials.Load()}
}

// Close closes the connection, fails outstanding calls with ErrClosed and
// waits for the reader goroutine. Further calls return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cn := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cn != nil {
		cn.kill(ErrClosed)
		<-cn.done
	}
	return nil
}

// Call sends one request and waits for its reply. params must encode to a
// JSON object or array, or be nil (no params member). On success the result
// is decoded into result unless result is nil. An error reply is returned as
// *RPCError exactly as SPDK sent it.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	if method == "" {
		return kverr.New(kverr.InvalidParams, "", "spdk: empty method name")
	}
	body, err := encodeParams(method, params)
	if err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.getConn(ctx)
	if err != nil {
		return err
	}
	id := c.nextID.Add(1)
	req, err := json.Marshal(request{JSONRPC: "2.0", ID: id, Method: method, Params: body})
	if err != nil {
		return fmt.Errorf("spdk: %s: encode request: %w", method, err)
	}
	ch := make(chan outcome, 1)
	if err := cn.register(id, ch); err != nil {
		return err
	}
	if err := cn.write(ctx, req); err != nil {
		return fmt.Errorf("spdk: %s: %w", method, err)
	}
	c.calls.Add(1)
	select {
	case o := <-ch:
		return finish(method, o, result)
	case <-ctx.Done():
		cn.unregister(id)
		return fmt.Errorf("spdk: %s (id %d): %w", method, id, ctx.Err())
	}
}

// BatchCall is one element of a Batch.
type BatchCall struct {
	Method string
	Params any
	Result any   // decoded into on success, unless nil
	Err    error // set by Batch: nil, *RPCError, or a transport error
}

// Batch sends the calls as one JSON-RPC batch (a JSON array written in one
// piece) and waits for every reply. The returned error is non-nil only when
// the batch could not be sent or waited for; per-call outcomes are in
// calls[i].Err.
func (c *Client) Batch(ctx context.Context, calls []*BatchCall) error {
	if len(calls) == 0 {
		return kverr.New(kverr.InvalidParams, "", "spdk: empty batch (SPDK answers -32600)")
	}
	reqs := make([]request, len(calls))
	for i, bc := range calls {
		if bc.Method == "" {
			return kverr.New(kverr.InvalidParams, "", "spdk: batch element %d: empty method", i)
		}
		body, err := encodeParams(bc.Method, bc.Params)
		if err != nil {
			return err
		}
		reqs[i] = request{JSONRPC: "2.0", Method: bc.Method, Params: body}
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	cn, err := c.getConn(ctx)
	if err != nil {
		return err
	}
	chans := make([]chan outcome, len(calls))
	for i := range reqs {
		reqs[i].ID = c.nextID.Add(1)
		chans[i] = make(chan outcome, 1)
		if err := cn.register(reqs[i].ID, chans[i]); err != nil {
			for _, r := range reqs[:i] {
				cn.unregister(r.ID)
			}
			return err
		}
	}
	data, err := json.Marshal(reqs)
	if err != nil {
		return fmt.Errorf("spdk: encode batch: %w", err)
	}
	if err := cn.write(ctx, data); err != nil {
		return fmt.Errorf("spdk: batch: %w", err)
	}
	c.calls.Add(uint64(len(calls)))
	for i, bc := range calls {
		select {
		case o := <-chans[i]:
			bc.Err = finish(bc.Method, o, bc.Result)
		case <-ctx.Done():
			for _, r := range reqs[i:] {
				cn.unregister(r.ID)
			}
			for _, rest := range calls[i:] {
				rest.Err = ctx.Err()
			}
			return fmt.Errorf("spdk: batch: %w", ctx.Err())
		}
	}
	return nil
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      uint64          `json:"id"` // never omitted: an id-less request is a notification
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func encodeParams(method string, params any) (json.RawMessage, error) {
	if params == nil {
		return nil, nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, kverr.New(kverr.InvalidParams, "", "spdk: %s: encode params: %v", method, err)
	}
	t := bytes.TrimSpace(b)
	if string(t) == "null" {
		return nil, nil
	}
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return nil, kverr.New(kverr.InvalidParams, "", "spdk: %s: params must be a JSON object or array, got %.32s", method, t)
	}
	return t, nil
}

func finish(method string, o outcome, result any) error {
	if o.err != nil {
		return fmt.Errorf("spdk: %s: %w", method, o.err)
	}
	if o.r.Err != nil {
		e := *o.r.Err
		e.Method = method
		return &e
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(o.r.Result, result); err != nil {
		return fmt.Errorf("%w: %s result %.80s: %v", ErrBadReply, method, o.r.Result, err)
	}
	return nil
}

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.cfg.CallTimeout < 0 {
		return context.WithCancel(ctx)
	}
	d := c.cfg.CallTimeout
	if d == 0 {
		d = DefaultCallTimeout
	}
	return context.WithTimeout(ctx, d)
}

// getConn returns the live connection, dialing one if there is none or the
// current one died. Only one dial runs at a time; no lock is held while it does.
func (c *Client) getConn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if c.cur != nil && c.cur.alive() {
			cn := c.cur
			c.mu.Unlock()
			return cn, nil
		}
		if d := c.dialing; d != nil {
			c.mu.Unlock()
			select {
			case <-d:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		d := make(chan struct{})
		c.dialing = d
		redial := c.cur != nil
		c.mu.Unlock()

		var dl net.Dialer
		nc, err := dl.DialContext(ctx, "unix", c.cfg.socket())

		c.mu.Lock()
		c.dialing = nil
		close(d)
		if err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("spdk: dial %s: %w", c.cfg.socket(), err)
		}
		if c.closed {
			c.mu.Unlock()
			nc.Close()
			return nil, ErrClosed
		}
		cn := &conn{nc: nc, done: make(chan struct{}), pending: make(map[uint64]chan outcome)}
		old := c.cur
		c.cur = cn
		if redial {
			c.redials.Add(1)
		}
		c.mu.Unlock()
		if old != nil {
			<-old.done // already dead; make sure its reader is gone
		}
		go c.readLoop(cn)
		return cn, nil
	}
}

func (c *Client) readLoop(cn *conn) {
	defer close(cn.done)
	f := NewFramer(c.cfg.MaxReply)
	buf := make([]byte, 64<<10)
	for {
		n, rerr := cn.nc.Read(buf)
		if n > 0 {
			f.Feed(buf[:n])
			for {
				v, err := f.Next()
				if err != nil {
					cn.kill(err)
					return
				}
				if v == nil {
					break
				}
				if err := c.dispatch(cn, v); err != nil {
					cn.kill(err)
					return
				}
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			cn.kill(rerr)
			return
		}
	}
}

// dispatch routes the replies of one framed value to their calls.
func (c *Client) dispatch(cn *conn, v []byte) error {
	replies, err := DecodeReplies(v)
	if err != nil {
		return err
	}
	for _, r := range replies {
		switch {
		case r.HasNumericID():
			if ch := cn.take(r.ID); ch != nil {
				ch <- outcome{r: r}
			} else {
				c.late.Add(1)
			}
		case r.HasNullID():
			// SPDK answers with id null only for requests it could not read an
			// id from. Our requests always carry a valid id, so this is only
			// attributable when exactly one call is outstanding.
			if ch := cn.takeSole(); ch != nil {
				ch <- outcome{r: r}
			} else {
				c.orphans.Add(1)
			}
		default:
			c.orphans.Add(1)
		}
	}
	return nil
}

func (cn *conn) alive() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err == nil
}

func (cn *conn) register(id uint64, ch chan outcome) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.err != nil {
		return fmt.Errorf("%w: %v", ErrConnLost, cn.err)
	}
	cn.pending[id] = ch
	return nil
}

func (cn *conn) unregister(id uint64) {
	cn.mu.Lock()
	delete(cn.pending, id)
	cn.mu.Unlock()
}

func (cn *conn) take(id uint64) chan outcome {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	ch := cn.pending[id]
	delete(cn.pending, id)
	return ch
}

func (cn *conn) takeSole() chan outcome {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.pending) != 1 {
		return nil
	}
	for id, ch := range cn.pending {
		delete(cn.pending, id)
		return ch
	}
	return nil
}

// kill marks the connection dead, closes the socket and fails every
// outstanding call. Safe to call more than once.
func (cn *conn) kill(cause error) {
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return
	}
	cn.err = cause
	pending := cn.pending
	cn.pending = map[uint64]chan outcome{}
	cn.mu.Unlock()
	cn.nc.Close()
	err := cause
	if !errors.Is(cause, ErrClosed) {
		err = fmt.Errorf("%w: %v", ErrConnLost, cause)
	}
	for _, ch := range pending {
		ch <- outcome{err: err}
	}
}

// write sends one whole request. A failed or interrupted write leaves the
// stream in an unknown state, so it kills the connection.
func (cn *conn) write(ctx context.Context, b []byte) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		cn.nc.SetWriteDeadline(dl)
	} else {
		cn.nc.SetWriteDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { cn.nc.SetWriteDeadline(time.Unix(1, 0)) })
	_, err := cn.nc.Write(b)
	stop()
	if err != nil {
		cn.kill(err)
		return fmt.Errorf("%w: write: %v", ErrConnLost, err)
	}
	return nil
}
