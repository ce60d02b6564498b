package fastrpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"syscall"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ClientConfig configures a Conn. Zero values mean the defaults.
type ClientConfig struct {
	// Addrs are tried in order when dialling; the first that answers the
	// hello is used until it fails (in HA mode only the leader listens).
	Addrs []string
	// Fallback carries streams, and unary calls while the fast path is
	// unavailable (required).
	Fallback grpc.ClientConnInterface
	// MaxConns bounds the connections (and so the calls in flight) of the
	// fast path; more callers wait. Default 64.
	MaxConns int
	// MaxIdle bounds the connections kept open between calls. Default 16.
	MaxIdle int
	// DialTimeout bounds dialling and the hello. Default 5s.
	DialTimeout time.Duration
	// Token, when set, is sent in the hello (see helloToken): a server
	// with credentials refuses the connection without a token it knows.
	Token string
	// TLS, when set, wraps every fast-path connection in TLS (the master
	// terminates TLS on its listener, before the fast path and gRPC split).
	TLS *tls.Config
}

// Defaults.
const (
	DefaultMaxConns    = 64
	DefaultMaxIdle     = 16
	DefaultDialTimeout = 5 * time.Second
	// A server that does not speak the fast path is asked again after
	// noFastRetry; an unreachable one after unreachableRetry (calls use
	// the fallback meanwhile, which reports the failure in gRPC's terms).
	noFastRetry      = time.Minute
	unreachableRetry = time.Second
)

// Validate checks the configuration.
func (c ClientConfig) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.New("fastrpc: no server address")
	case c.Fallback == nil:
		return errors.New("fastrpc: no fallback connection")
	case len(c.Token) > maxTokenLen:
		return fmt.Errorf("fastrpc: token of %d bytes exceeds %d", len(c.Token), maxTokenLen)
	case c.MaxConns < 0 || c.MaxIdle < 0 || c.DialTimeout < 0:
		return fmt.Errorf("fastrpc: negative limit in %+v", c)
	}
	return nil
}

// Conn is a grpc.ClientConnInterface that sends unary calls over the fast
// path and everything else over Fallback. Safe for concurrent use.
type Conn struct {
	cfg   ClientConfig
	slots chan struct{} // a token per connection in use

	mu       sync.Mutex
	idle     []*fconn  // most recently used last
	next     int       // index in Addrs of the server that last answered
	offUntil time.Time // fast path not tried before this time
	closed   bool
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// Dial returns a Conn; it connects lazily, on the first call.
func Dial(cfg ClientConfig) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = DefaultMaxIdle
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	return &Conn{cfg: cfg, slots: make(chan struct{}, cfg.MaxConns)}, nil
}

// NewStream opens a stream over the fallback connection.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.cfg.Fallback.NewStream(ctx, desc, method, opts...)
}

// Invoke makes a unary call, over the fast path when the server offers it.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	in, ok1 := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 || !c.fastOn() {
		return c.cfg.Fallback.Invoke(ctx, method, args, reply, opts...)
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-c.slots }()
	fc, err := c.take(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return c.cfg.Fallback.Invoke(ctx, method, args, reply, opts...)
	}
	err, broken := fc.call(ctx, method, in, out)
	if broken {
		fc.nc.Close()
	} else {
		c.give(fc)
	}
	return err
}

// Close closes the idle fast-path connections; the ones in use close when
// their call ends. It does not close Fallback.
func (c *Conn) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, fc := range idle {
		fc.nc.Close()
	}
	return nil
}

func (c *Conn) fastOn() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && !time.Now().Before(c.offUntil)
}

// take returns an idle connection that is still open, or dials one.
func (c *Conn) take(ctx context.Context) (*fconn, error) {
	for {
		c.mu.Lock()
		n := len(c.idle)
		if n == 0 {
			c.mu.Unlock()
			break
		}
		fc := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if fc.alive() {
			return fc, nil
		}
		fc.nc.Close() // closed by the server (restart, lost leadership)
	}
	return c.dial(ctx)
}

func (c *Conn) give(fc *fconn) {
	c.mu.Lock()
	if c.closed || len(c.idle) >= c.cfg.MaxIdle {
		c.mu.Unlock()
		fc.nc.Close()
		return
	}
	c.idle = append(c.idle, fc)
	c.mu.Unlock()
}

// dial tries every address, starting with the one that last answered.
func (c *Conn) dial(ctx context.Context) (*fconn, error) {
	c.mu.Lock()
	first := c.next
	c.mu.Unlock()
	var errs []error
	noFast := 0
	for i := range c.cfg.Addrs {
		idx := (first + i) % len(c.cfg.Addrs)
		fc, err := c.dialOne(ctx, c.cfg.Addrs[idx])
		if err == nil {
			c.mu.Lock()
			c.next = idx
			c.mu.Unlock()
			return fc, nil
		}
		if errors.Is(err, errMalformed) {
			noFast++
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	retry := unreachableRetry
	if noFast > 0 {
		retry = noFastRetry // a server answered, but not the hello
	}
	c.mu.Lock()
	c.offUntil = time.Now().Add(retry)
	c.mu.Unlock()
	return nil, errors.Join(errs...)
}

func (c *Conn) dialOne(ctx context.Context, addr string) (*fconn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	deadline, _ := dctx.Deadline()
	_ = nc.SetDeadline(deadline)
	if c.cfg.TLS != nil {
		cfg := c.cfg.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("fastrpc: TLS with %s: %w", addr, err)
		}
		nc = tc
	}
	var b [helloLen]byte
	_, err = nc.Write(c.helloBytes())
	if err == nil {
		_, err = io.ReadFull(nc, b[:])
		if err == nil {
			err = checkHello(b[:])
		} else if !isTimeout(err) {
			// The peer closed on our hello: not a fast-path server.
			err = fmt.Errorf("%w: %s closed the connection on the hello: %v", errMalformed, addr, err)
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return &fconn{nc: nc, r: bufio.NewReaderSize(nc, 4096)}, nil
}

// helloBytes is the client's hello, with its token when configured.
func (c *Conn) helloBytes() []byte {
	if c.cfg.Token == "" {
		return hello[:]
	}
	h := append([]byte(nil), hello[:]...)
	h[5] = helloToken
	h = append(h, byte(len(c.cfg.Token)>>8), byte(len(c.cfg.Token)))
	return append(h, c.cfg.Token...)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fconn is one fast-path connection, used by one call at a time.
type fconn struct {
	nc      net.Conn
	r       *bufio.Reader
	wbuf    []byte
	rbuf    []byte
	armed   bool // a deadline (a context's end) is set on nc
	scratch [1]byte
	// alive's, made at its first use:
	rc     syscall.RawConn
	peekFn func(fd uintptr) bool
	quiet  bool
}

// aLongTimeAgo is a deadline in the past: it wakes blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// call sends one request and reads its answer. broken reports that the
// connection can no longer be used (the error is then Unavailable or the
// context's).
func (fc *fconn) call(ctx context.Context, method string, in, out proto.Message) (err error, broken bool) {
	var timeoutMs uint32
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl)
		if rem <= 0 {
			return status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false
		}
		timeoutMs = uint32(min(rem.Milliseconds()+1, math.MaxUint32))
	}
	if fc.armed {
		_ = fc.nc.SetDeadline(time.Time{})
		fc.armed = false
	}
	// The context's end, by its deadline or a cancel, wakes the I/O: its
	// own timer fires at the deadline, so the socket needs no deadline of
	// its own (setting one per call armed two more runtime timers a call).
	stop := context.AfterFunc(ctx, func() { _ = fc.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			fc.armed = true // the cancel poisoned the deadline: reset it next call
		}
		if err != nil && ctx.Err() != nil {
			// Failed because the context ended (the socket deadline or the
			// cancel woke the I/O): report it in the context's terms. The
			// connection is mid-call, so it cannot be reused.
			err, broken = status.FromContextError(ctx.Err()).Err(), true
		}
	}()

	// Frame: header and method, then the message marshalled in place.
	fc.wbuf, err = appendRequest(fc.wbuf[:0], method, timeoutMs, nil)
	if err != nil {
		return status.Error(codes.Internal, err.Error()), false
	}
	start := len(fc.wbuf)
	fc.wbuf, err = proto.MarshalOptions{}.MarshalAppend(fc.wbuf, in)
	if err != nil {
		return status.Errorf(codes.Internal, "fastrpc: encode %s request: %v", method, err), false
	}
	body := len(fc.wbuf) - start
	if body > MaxPayload {
		return status.Errorf(codes.ResourceExhausted, "fastrpc: %s request of %d bytes exceeds %d", method, body, MaxPayload), false
	}
	putLen(fc.wbuf[8:12], body)
	if _, err := fc.nc.Write(fc.wbuf); err != nil {
		return ioError(method, err), true
	}
	if cap(fc.wbuf) > keepBuffer {
		fc.wbuf = nil
	}

	var h [respHeaderLen]byte
	if _, err := io.ReadFull(fc.r, h[:]); err != nil {
		return ioError(method, err), true
	}
	st, plen, err := parseResponseHeader(h[:])
	if err != nil {
		return status.Errorf(codes.Unavailable, "fastrpc: %s: %v", method, err), true
	}
	if cap(fc.rbuf) < plen {
		fc.rbuf = make([]byte, plen)
	}
	payload := fc.rbuf[:plen]
	if _, err := io.ReadFull(fc.r, payload); err != nil {
		return ioError(method, err), true
	}
	if cap(fc.rbuf) > keepBuffer {
		fc.rbuf = nil
	}
	if st == statusError {
		var sp spb.Status
		if err := proto.Unmarshal(payload, &sp); err != nil {
			return status.Errorf(codes.Internal, "fastrpc: %s: undecodable error status: %v", method, err), false
		}
		if sp.Code == int32(codes.OK) {
			return status.Errorf(codes.Internal, "fastrpc: %s: error frame with status OK", method), false
		}
		return status.ErrorProto(&sp), false
	}
	if err := proto.Unmarshal(payload, out); err != nil {
		return status.Errorf(codes.Internal, "fastrpc: decode %s response: %v", method, err), false
	}
	return nil, false
}

func ioError(method string, err error) error {
	return status.Errorf(codes.Unavailable, "fastrpc: %s: connection to master: %v", method, err)
}
