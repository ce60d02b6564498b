package resp

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/client"
)

// Defaults of Config's zero values.
const (
	DefaultMaxClients   = 10000
	DefaultMaxValueSize = 512 << 20 // redis-server's proto-max-bulk-len
	connBufferSize      = 16 << 10
)

// Config is the front end's settings. The zero value serves without a
// password, at most DefaultMaxClients connections and values up to
// DefaultMaxValueSize.
type Config struct {
	// Password, when set, is what AUTH (and HELLO ... AUTH) must present
	// before any other command; empty: no authentication, as redis-server
	// without requirepass.
	Password     string
	MaxClients   int    // connections served at once; more are refused with an error
	MaxValueSize int    // largest bulk string accepted in a request
	Version      string // kvtier's version, reported by INFO server
	Logger       *slog.Logger
	// Segments, when set, is the memory of the DRAM segments this process
	// serves (an appliance's): GET answers from it and SET compares with
	// it in place, under the read lease, instead of copying each value
	// (see the package doc, "Copies"). Nil: every value is copied.
	Segments client.SegmentMemory
	// EventLoop serves connections from event loops (epoll, one per 4
	// CPUs, Linux only) instead of a goroutine each: short requests are read,
	// run and answered without a goroutine wake-up each (see the package
	// doc, "Event loop"). Off by default (--resp-event-loop).
	EventLoop bool
}

// Validate reports a setting out of range.
func (c *Config) Validate() error {
	if c.MaxClients < 0 {
		return fmt.Errorf("resp: MaxClients %d is negative", c.MaxClients)
	}
	if c.MaxValueSize < 0 {
		return fmt.Errorf("resp: MaxValueSize %d is negative", c.MaxValueSize)
	}
	return nil
}

// Server is one Redis-protocol front end over one SDK client.
type Server struct {
	store *client.Client
	cfg   Config
	log   *slog.Logger
	pool  bufPool
	start time.Time

	ctx    context.Context // cancelled by Close: ends every command in flight
	cancel context.CancelFunc

	mu     sync.Mutex // guards the fields below
	lis    []net.Listener
	conns  map[*conn]struct{}
	closed bool

	cursors  cursorTable
	recent   *recentTable
	suspects suspectSet // keys read through the copying path for a while (inplace.go)
	watching watchTable // long SETs compared while they arrive (watch.go)
	keyLocks [256]sync.RWMutex
	lockSeed maphash.Seed   // of keyLock's hash
	wg       sync.WaitGroup // connections and event loops
	loops    []*eventLoop   // Config.EventLoop; fixed after New

	nextID     atomic.Int64
	nConns     atomic.Int64
	connsTotal atomic.Uint64
	rejected   atomic.Uint64
	commands   atomic.Uint64
	loopRuns   atomic.Uint64 // commands run by an event loop (tests)
	watchSame  atomic.Uint64 // SETs found equal through the bounce buffer (tests)
	hits       atomic.Uint64
	misses     atomic.Uint64
	port       atomic.Int64
}

// New returns a server that stores through c (shared by every connection;
// it is safe for concurrent use). c stays the caller's to close, after the
// server.
func New(c *client.Client, cfg Config) (*Server, error) {
	if c == nil {
		return nil, errors.New("resp: nil client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.MaxValueSize == 0 {
		cfg.MaxValueSize = DefaultMaxValueSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{store: c, cfg: cfg, log: cfg.Logger, start: time.Now(), ctx: ctx, cancel: cancel,
		conns: map[*conn]struct{}{}, lockSeed: maphash.MakeSeed(), cursors: newCursorTable(cursorTableSize), recent: newRecentTable()}
	if cfg.EventLoop {
		if err := s.startLoops(); err != nil {
			cancel()
			return nil, err
		}
	}
	return s, nil
}

// Serve accepts connections on lis until Close; it returns nil after
// Close, else the accept error.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		lis.Close()
		return nil
	}
	s.lis = append(s.lis, lis)
	s.mu.Unlock()
	if ta, ok := lis.Addr().(*net.TCPAddr); ok {
		s.port.Store(int64(ta.Port))
	}
	var backoff time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors: keep serving the open
				// connections and try again shortly, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("resp: accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.connsTotal.Add(1)
		if s.nConns.Load() >= int64(s.cfg.MaxClients) {
			s.rejected.Add(1)
			_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
			nc.Close()
			continue
		}
		c := s.newConn(nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.nConns.Add(1)
		s.wg.Add(1)
		s.mu.Unlock()
		if c.loop = s.loopFor(c); c.loop == nil || !c.loop.register(c) {
			go s.serveConn(c, nil, false)
		}
	}
}

// Close stops accepting, closes every connection (commands in flight are
// cancelled) and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, l := range s.lis {
		l.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	for _, l := range s.loops {
		l.stop()
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// conn is one client connection; only its goroutine touches it, except
// Close (which closes nc) and CLIENT LIST/INFO readers of the atomics.
type conn struct {
	s     *Server
	nc    net.Conn
	raw   *rawIO // nil when nc is not a TCP connection
	r     *reader
	w     writer
	id    int64
	addr  string
	since time.Time

	authed  bool
	name    string
	libName string
	libVer  string
	lower   [24]byte // the command name, lower-cased

	watched    client.View // what watchSet compared the value being read with (inplace.go)
	watchedKey string      // its key

	// Event-loop mode (loop_linux.go). The connection is served either by
	// its loop (raw.nowait set) or by a goroutine of its own, never both.
	loop  *eventLoop // nil: goroutine mode only
	slot  int32      // its epoll token while the loop serves it
	gen   int32      // counts registrations: an event of an earlier one is ignored
	yield bool       // the command asks to be run again by the goroutine
}

func (s *Server) newConn(nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, id: s.nextID.Add(1), addr: nc.RemoteAddr().String(), since: time.Now(),
		authed: s.cfg.Password == ""}
	var rw io.ReadWriter = nc
	if c.raw = newRawIO(nc); c.raw != nil {
		rw = c.raw
	}
	c.r = newReader(rw, connBufferSize, s.cfg.MaxValueSize, &s.pool)
	if s.cfg.Segments != nil {
		c.r.watch = c.watchSet
	}
	c.w = writer{nc: rw, vc: nc, buf: make([]byte, 0, 4096), proto: 2}
	return c
}

// finish closes c and forgets it.
func (s *Server) finish(c *conn) {
	c.r.release()
	c.nc.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.nConns.Add(-1)
	s.wg.Done()
}

// serveConn serves c from a goroutine of its own until it closes, or
// until it can go back to its event loop (c.loop) with nothing left to
// read or write. From an event loop, it first sends the replies the
// socket did not take, closes c when quit, and runs args (a command
// already parsed) when set.
func (s *Server) serveConn(c *conn, args [][]byte, quit bool) {
	back := false
	defer func() {
		if !back {
			s.finish(c)
		}
	}()
	if c.raw != nil {
		c.w.vc = c.nc
		if err := c.raw.drain(); err != nil || quit {
			return
		}
	}
	long := false // the last command had an argument of bigArg bytes or more
	for {
		if args == nil {
			// Back to the loop once nothing is left to read, unless the
			// last command was long: the next is likely long too (a
			// client storing 1 MiB values), and staying saves the loop's
			// hand-over and epoll registration per request.
			if c.loop != nil && !long && c.r.br.Buffered() == 0 && c.w.err == nil && len(c.w.buf) == 0 && c.loop.register(c) {
				back = true
				return
			}
			var err error
			args, err = c.r.next()
			if err != nil {
				var pe *errProtocol
				if errors.As(err, &pe) {
					c.w.error("ERR " + pe.Error())
					_ = c.w.flush()
				}
				return
			}
		}
		quit := false
		long = len(c.r.bigs) > 0
		if len(args) > 0 {
			s.commands.Add(1)
			quit = c.exec(args)
		}
		// Pipelining: answer a whole batch of requests in one write, and
		// flush only when no request is waiting in the read buffer.
		if quit || c.r.br.Buffered() == 0 {
			if err := c.w.flush(); err != nil {
				return
			}
		}
		if quit {
			return
		}
		args = nil
	}
}
