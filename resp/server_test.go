package resp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/fastrpc"
	"github.com/kvtier/kvtier/master"
)

// startServer runs a master, an appliance and the front end over the
// appliance's client in this process (so -race sees all of it) and
// returns the front end's address. Values are read in place from the
// appliance's segments (Config.Segments), as `kvtier standalone` does.
func startServer(t *testing.T) (*Server, string) {
	s, addr, _ := startServerOn(t, Config{}, true)
	return s, addr
}

// startServerWith is startServer with cfg as given: without
// Config.Segments every value is copied.
func startServerWith(t *testing.T, cfg Config) (*Server, string) {
	s, addr, _ := startServerOn(t, cfg, false)
	return s, addr
}

// startServerOn is startServerWith that also returns the appliance and,
// with inPlace, sets Config.Segments to its segment memory.
func startServerOn(t *testing.T, cfg Config, inPlace bool) (*Server, string, *appliance.Appliance) {
	t.Helper()
	return startServerLease(t, cfg, inPlace, 0)
}

// startServerLease is startServerOn with the master's read lease time
// (0: its default).
func startServerLease(t *testing.T, cfg Config, inPlace bool, lease time.Duration) (*Server, string, *appliance.Appliance) {
	t.Helper()
	m, err := master.New(master.Config{LeaseTTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := master.NewGRPCServer(m)
	gs := grpc.NewServer()
	kvtierpb.RegisterMasterServer(gs, ms)
	fast := fastrpc.NewServer(&kvtierpb.Master_ServiceDesc, ms, nil)
	go func() { _ = gs.Serve(fast.Split(mlis)) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	a, err := appliance.Start(context.Background(), appliance.Config{MasterAddr: mlis.Addr().String(), Name: "resp-test",
		DRAM: 64 << 20, Hugepages: dram.HugepageOff, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if inPlace {
		cfg.Segments = a.SegmentMemory
	}
	cfg.EventLoop = cfg.EventLoop || testEventLoop
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s, err := New(a.Client(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
		_ = a.Close(context.Background())
		gs.Stop()
		_ = fast.Close()
		cancel()
		<-done
	})
	return s, lis.Addr().String(), a
}

// testWriter sends the server's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// client is a minimal RESP client: pipelined sends, replies read in order.
type tclient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func dial(t testing.TB, addr string) *tclient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return &tclient{t: t, nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}
}

func (c *tclient) send(args ...string) {
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	_, _ = c.bw.Write(encode(bs))
}

func (c *tclient) read() (string, error) {
	line, err := c.br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch line[0] {
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "(nil)", nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var parts []string
		for range n {
			p, err := c.read()
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return "[" + strings.Join(parts, " ") + "]", nil
	}
	return line, nil
}

func (c *tclient) do(args ...string) string {
	c.t.Helper()
	c.send(args...)
	if err := c.bw.Flush(); err != nil {
		c.t.Fatal(err)
	}
	r, err := c.read()
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// TestServerConcurrent: connections pipelining SET, GET, EXISTS, DEL and
// SCAN on shared keys, values of 100 B to 200 KiB (both argument paths).
// Every GET returns nil or exactly one of the values ever written under
// its key, never a mix; then Close ends connections left open.
func TestServerConcurrent(t *testing.T) {
	for _, inPlace := range []bool{true, false} {
		t.Run(fmt.Sprintf("inPlace=%v", inPlace), func(t *testing.T) { testServerConcurrent(t, inPlace) })
	}
}

func testServerConcurrent(t *testing.T, inPlace bool) {
	s, addr, _ := startServerOn(t, Config{}, inPlace)
	const conns, rounds, keys = 16, 30, 8
	value := func(k, w int) string {
		size := 100
		if w%2 == 1 {
			size = 200 << 10 // read into pooled buffers
		}
		return strings.Repeat(string(rune('a'+w%26)), size) + fmt.Sprintf("|%d|%d", k, w)
	}
	valid := func(k int, got string) bool {
		if got == "(nil)" {
			return true
		}
		for w := range conns {
			if got == value(k, w) {
				return true
			}
		}
		return false
	}
	var wg sync.WaitGroup
	errs := make(chan string, conns)
	for w := range conns {
		wg.Go(func() {
			c := dial(t, addr)
			defer c.nc.Close()
			for r := range rounds {
				k := (w + r) % keys
				key := fmt.Sprintf("k%d", k)
				c.send("SET", key, value(k, w))
				c.send("GET", key)
				c.send("EXISTS", key, "k0", "nope")
				if r%7 == 0 {
					c.send("DEL", key)
				}
				c.send("SCAN", "0", "MATCH", "k*", "COUNT", "3")
				if err := c.bw.Flush(); err != nil {
					errs <- err.Error()
					return
				}
				set, _ := c.read()
				get, _ := c.read()
				ex, _ := c.read()
				if set != "+OK" {
					errs <- "SET: " + set
					return
				}
				if !valid(k, get) {
					errs <- fmt.Sprintf("GET %s: %.60q", key, get)
					return
				}
				if !strings.HasPrefix(ex, ":") {
					errs <- "EXISTS: " + ex
					return
				}
				if r%7 == 0 {
					if d, _ := c.read(); !strings.HasPrefix(d, ":") {
						errs <- "DEL: " + d
						return
					}
				}
				if sc, _ := c.read(); !strings.HasPrefix(sc, "[") {
					errs <- "SCAN: " + sc
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	c := dial(t, addr)
	if got := c.do("INFO", "stats"); !strings.Contains(got, "keyspace_hits:") {
		t.Fatalf("INFO stats: %q", got)
	}
	// Close with this connection open: it must end, not hang.
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung with a connection open")
	}
	if _, err := c.br.ReadByte(); err == nil {
		t.Fatal("connection still open after Close")
	}
}

// TestServerLargeValueRoundTrip: a 3 MiB value, binary, through the
// pooled-buffer path both ways, and a pipelined MGET of it.
func TestServerLargeValueRoundTrip(t *testing.T) {
	for _, inPlace := range []bool{true, false} {
		t.Run(fmt.Sprintf("inPlace=%v", inPlace), func(t *testing.T) { testLargeValueRoundTrip(t, inPlace) })
	}
}

func testLargeValueRoundTrip(t *testing.T, inPlace bool) {
	_, addr, _ := startServerOn(t, Config{}, inPlace)
	c := dial(t, addr)
	defer c.nc.Close()
	v := bytes.Repeat([]byte{0, '\r', '\n', 0xff, 'x'}, 3<<20/5)
	if got := c.do("SET", "big", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	if got := c.do("GET", "big"); got != string(v) {
		t.Fatalf("GET big: %d bytes, want %d", len(got), len(v))
	}
	if got := c.do("MGET", "big", "none"); got != "["+string(v)+" (nil)]" {
		t.Fatalf("MGET: %d bytes", len(got))
	}
	if got := c.do("STRLEN", "big"); got != ":"+strconv.Itoa(len(v)) {
		t.Fatalf("STRLEN %q", got)
	}
	// SET of the same bytes again: answered without a put; of other bytes: replaced.
	if got := c.do("SET", "big", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	v[100] = 'Q'
	if got := c.do("SET", "big", string(v)); got != "+OK" {
		t.Fatal(got)
	}
	if got := c.do("GET", "big"); got != string(v) {
		t.Fatal("GET after replacing with other bytes of the same size returned the old value")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil {
		t.Fatal("nil client accepted")
	}
	cfg := Config{MaxClients: -1}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MaxClients") {
		t.Fatalf("Validate: %v", err)
	}
}

// TestServerMaxClients: a connection beyond MaxClients is answered with
// redis-server's error and closed; one that leaves frees its place.
func TestServerMaxClients(t *testing.T) {
	_, addr := startServerWith(t, Config{MaxClients: 2})
	a, b := dial(t, addr), dial(t, addr)
	defer a.nc.Close()
	if got := a.do("PING"); got != "+PONG" {
		t.Fatal(got)
	}
	if got := b.do("PING"); got != "+PONG" {
		t.Fatal(got)
	}
	c := dial(t, addr)
	if got, err := c.read(); got != "-ERR max number of clients reached" {
		t.Fatalf("third connection: %q %v", got, err)
	}
	if _, err := c.br.ReadByte(); err == nil {
		t.Fatal("refused connection left open")
	}
	b.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := dial(t, addr)
		d.send("PING")
		_ = d.bw.Flush()
		got, _ := d.read()
		d.nc.Close()
		if got == "+PONG" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a place never freed: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
