package fastrpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// helloTimeout bounds how long an accepted connection may take to send its
// first four bytes before it is dropped.
const helloTimeout = 10 * time.Second

// keepBuffer is the largest per-connection buffer kept between calls; a
// larger one (a big batch call) is left to the garbage collector.
const keepBuffer = 1 << 20

// Server answers fast-path calls with a gRPC service's unary handlers.
type Server struct {
	methods     map[string]grpc.MethodDesc // by full method name
	names       map[string]string          // the keys of methods, to intern a request's
	impl        any
	interceptor grpc.UnaryServerInterceptor
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	poll poller // waits for the next request (see "Polling")

	// authenticate, when set, must accept a connection's token (see
	// helloToken) before any call on it; calls then carry the token as
	// `authorization: Bearer ...` metadata, as gRPC calls do.
	authenticate func(token string, c net.Conn) bool
	// connContext, when set, derives each connection's call context (the
	// master adds the peer's TLS state).
	connContext func(ctx context.Context, c net.Conn) context.Context

	mu        sync.Mutex
	closed    bool
	conns     map[net.Conn]struct{}
	listeners []*splitListener
}

// NewServer serves desc's unary methods, implemented by impl, through
// interceptor (may be nil), exactly as grpc.Server would call them.
func NewServer(desc *grpc.ServiceDesc, impl any, interceptor grpc.UnaryServerInterceptor) *Server {
	s := &Server{methods: map[string]grpc.MethodDesc{}, names: map[string]string{}, impl: impl, interceptor: interceptor, conns: map[net.Conn]struct{}{}}
	for _, m := range desc.Methods {
		name := "/" + desc.ServiceName + "/" + m.MethodName
		s.methods[name] = m
		s.names[name] = name
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.poll.polling = &serverPolling
	s.poll.d.Store(int64(DefaultServerPoll))
	return s
}

// SetAuthenticate makes every connection present a token that accept
// (or the connection c, e.g. its client certificate) takes before its first call (nil: tokens are optional and only passed
// on). Set it before Split.
func (s *Server) SetAuthenticate(accept func(token string, c net.Conn) bool) {
	s.authenticate = accept
}

// SetConnContext sets f to derive the context of every call on a
// connection from the server's and the connection. Set it before Split.
func (s *Server) SetConnContext(f func(ctx context.Context, c net.Conn) context.Context) {
	s.connContext = f
}

// SetPoll sets the longest a connection polls for its next request before
// it parks (DefaultServerPoll unless set; zero or negative: never). It may
// be called at any time; connections pick it up at their next wait.
func (s *Server) SetPoll(d time.Duration) { s.poll.d.Store(int64(d)) }

// Split takes over lis: fast-path connections are served by s, every other
// connection is returned by the returned listener's Accept (give it to
// grpc.Server.Serve). Closing the returned listener closes lis.
func (s *Server) Split(lis net.Listener) net.Listener {
	l := &splitListener{Listener: lis, s: s, conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return l
	}
	s.listeners = append(s.listeners, l)
	s.wg.Add(1)
	s.mu.Unlock()
	go l.acceptLoop()
	return l
}

// Close stops accepting, closes every fast-path connection and waits for
// their goroutines. Calls in progress finish their handler; their answers
// are lost with the connection.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	ls := s.listeners
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// track registers c (false when the server is closed).
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
	s.wg.Done()
}

// serveConn answers calls on c, whose hello was already read, until c
// breaks or sends a malformed frame.
func (s *Server) serveConn(c net.Conn, md metadata.MD) {
	if !s.track(c) {
		c.Close()
		return
	}
	defer s.untrack(c)
	base := s.ctx
	if s.connContext != nil {
		base = s.connContext(base, c)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if _, err := c.Write(hello[:]); err != nil {
		return
	}
	r := bufio.NewReaderSize(c, 4096)
	var in, out []byte
	var g gaps
	var answered time.Time
	var q decoder
	dec := q.decode // bound once: a closure per call would allocate
	pc := s.poll.conn(c)
	for {
		if r.Buffered() == 0 {
			pc.wait(g.window(time.Duration(s.poll.d.Load())))
		}
		var err error
		var buf []byte
		q.request, buf, err = readRequest(r, in, s.names)
		if err != nil {
			return
		}
		if !answered.IsZero() {
			g.add(time.Since(answered))
		}
		in = buf
		s.poll.calls.Add(1)
		out = s.call(base, q.request, dec, out[:0], md)
		s.poll.calls.Add(-1)
		if _, err := c.Write(out); err != nil {
			return
		}
		answered = time.Now()
		if cap(in) > keepBuffer {
			in = nil
		}
		if cap(out) > keepBuffer {
			out = nil
		}
	}
}

// decoder decodes the payload of the request it holds into a handler's
// message.
type decoder struct{ request }

func (d *decoder) decode(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "fastrpc: %T is not a protobuf message", m)
	}
	if err := proto.Unmarshal(d.payload, pm); err != nil {
		return status.Errorf(codes.InvalidArgument, "fastrpc: decode %s request: %v", d.method, err)
	}
	return nil
}

// call runs one request and appends its response frame to out; dec decodes
// q's payload.
func (s *Server) call(base context.Context, q request, dec func(any) error, out []byte, cmd metadata.MD) []byte {
	md, ok := s.methods[q.method]
	if !ok {
		return errorFrame(out, status.Errorf(codes.Unimplemented, "fastrpc: unknown method %q", q.method))
	}
	ctx, cancel := base, context.CancelFunc(func() {})
	if q.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(q.timeout)*time.Millisecond)
	}
	defer cancel()
	if cmd != nil {
		ctx = metadata.NewIncomingContext(ctx, cmd)
	}
	resp, err := md.Handler(s.impl, ctx, dec, s.interceptor)
	if err != nil {
		return errorFrame(out, err)
	}
	pm, ok := resp.(proto.Message)
	if !ok {
		return errorFrame(out, status.Errorf(codes.Internal, "fastrpc: %s answered %T", q.method, resp))
	}
	start := len(out)
	out = appendResponse(out, statusOK, nil)
	out, err = proto.MarshalOptions{}.MarshalAppend(out, pm)
	if err != nil {
		return errorFrame(out[:start], status.Errorf(codes.Internal, "fastrpc: encode %s response: %v", q.method, err))
	}
	body := len(out) - start - respHeaderLen
	if body > MaxPayload {
		return errorFrame(out[:start], status.Errorf(codes.ResourceExhausted, "fastrpc: %s response of %d bytes exceeds %d", q.method, body, MaxPayload))
	}
	putLen(out[start+8:start+12], body)
	return out
}

// errorFrame appends the response frame carrying err as a google.rpc.Status.
func errorFrame(out []byte, err error) []byte {
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, fmt.Sprintf("fastrpc: encode error: %v", merr)).Proto())
	}
	return appendResponse(out, statusError, b)
}

func putLen(b []byte, n int) {
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

// splitListener hands non-fast-path connections to its Accept.
type splitListener struct {
	net.Listener
	s         *Server
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	errMu     sync.Mutex
	err       error // guarded by errMu: why the accept loop stopped
}

func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.errMu.Lock()
		defer l.errMu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *splitListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		err = l.Listener.Close()
		l.stop(net.ErrClosed)
	})
	return err
}

// stop records err and closes done. Close and the accept loop may both
// call it at once: the check and the close happen under errMu, or both
// could see done open and close it twice.
func (l *splitListener) stop(err error) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if l.err == nil {
		l.err = err
	}
	select {
	case <-l.done:
	default:
		close(l.done)
	}
}

func (l *splitListener) acceptLoop() {
	defer l.s.wg.Done()
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// EMFILE and friends: back off and keep serving, as
				// grpc.Server does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.done:
				}
			}
			l.stop(err)
			return
		}
		delay = 0
		go l.classify(c)
	}
}

// classify reads the first four bytes of c and routes it.
func (l *splitListener) classify(c net.Conn) {
	var b [helloLen]byte
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	n, err := io.ReadFull(c, b[:4])
	if err != nil {
		c.Close()
		return
	}
	if [4]byte(b[:4]) == helloMagic {
		if _, err := io.ReadFull(c, b[4:]); err != nil {
			c.Close()
			return
		}
		flags, err := parseClientHello(b[:])
		if err != nil {
			c.Close()
			return
		}
		var token string
		if flags&helloToken != 0 {
			var lb [2]byte
			if _, err := io.ReadFull(c, lb[:]); err != nil {
				c.Close()
				return
			}
			n := int(lb[0])<<8 | int(lb[1])
			if n > maxTokenLen {
				c.Close()
				return
			}
			tb := make([]byte, n)
			if _, err := io.ReadFull(c, tb); err != nil {
				c.Close()
				return
			}
			token = string(tb)
		}
		if l.s.authenticate != nil && !l.s.authenticate(token, c) {
			c.Close() // refused before any call; the client falls back to gRPC, which names the refusal
			return
		}
		var md metadata.MD
		if token != "" {
			md = metadata.Pairs("authorization", "Bearer "+token)
		}
		_ = c.SetReadDeadline(time.Time{})
		l.s.serveConn(c, md)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: append([]byte(nil), b[:n]...)}
	select {
	case l.conns <- pc:
	case <-l.done:
		c.Close()
	}
}

// prefixConn replays the bytes classify read before the connection's own.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// NetConn returns the wrapped connection (a *tls.Conn under TLS).
func (p *prefixConn) NetConn() net.Conn { return p.Conn }

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
