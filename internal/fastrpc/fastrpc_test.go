package fastrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// cluster is a real master behind a gRPC server and, optionally, the fast
// path on the same listener.
type cluster struct {
	addr  string
	calls atomic.Int64 // unary calls seen by the interceptor (either path)
	grpc  *grpc.Server
	fast  *Server
	ms    kvtierpb.MasterServer
}

func startCluster(t testing.TB, withFast bool, addr string) *cluster {
	t.Helper()
	m, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return serveMaster(t, master.NewGRPCServer(m), withFast, addr)
}

func serveMaster(t testing.TB, ms kvtierpb.MasterServer, withFast bool, addr string) *cluster {
	t.Helper()
	c := &cluster{ms: ms}
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		c.calls.Add(1)
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.addr = lis.Addr().String()
	c.grpc = grpc.NewServer(grpc.UnaryInterceptor(icpt))
	kvtierpb.RegisterMasterServer(c.grpc, ms)
	glis := lis
	if withFast {
		c.fast = NewServer(&kvtierpb.Master_ServiceDesc, ms, icpt)
		glis = c.fast.Split(lis)
	}
	go func() { _ = c.grpc.Serve(glis) }()
	t.Cleanup(c.stop)
	return c
}

func (c *cluster) stop() {
	c.grpc.Stop()
	if c.fast != nil {
		_ = c.fast.Close()
	}
}

// dialBoth returns a plain gRPC client and a fast-path client of addr.
func dialBoth(t testing.TB, addr string) (kvtierpb.MasterClient, kvtierpb.MasterClient, *Conn) {
	t.Helper()
	gc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close() })
	fc, err := Dial(ClientConfig{Addrs: []string{addr}, Fallback: gc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.Close() })
	return kvtierpb.NewMasterClient(gc), kvtierpb.NewMasterClient(fc), fc
}

func mountSegment(t *testing.T, mc kvtierpb.MasterClient, client string) {
	t.Helper()
	ctx := context.Background()
	if _, err := mc.Heartbeat(ctx, &kvtierpb.HeartbeatRequest{ClientId: client}); err != nil {
		t.Fatal(err)
	}
	_, err := mc.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: client, Segment: &kvtierpb.Segment{
		Name: client + "/mem0", Type: kvtierpb.ReplicaType_MEMORY, Node: client, Endpoint: "127.0.0.1:1", Size: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
}

// fastUsed reports whether fc holds an idle fast-path connection, i.e. the
// last call went over the fast path.
func fastUsed(fc *Conn) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.idle) > 0
}

func TestSameAnswersAsGRPC(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	viaGRPC, viaFast, fc := dialBoth(t, c.addr)
	mountSegment(t, viaFast, "box")
	if !fastUsed(fc) {
		t.Fatal("no fast-path connection after a call: the call went over gRPC")
	}
	ctx := context.Background()
	for i, mc := range []kvtierpb.MasterClient{viaGRPC, viaFast} {
		key := []byte(fmt.Sprintf("k%d", i))
		ps, err := mc.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "box", Key: key, Size: 4096, Crc32C: 7, HasChecksum: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(ps.Replicas) != 1 || ps.Replicas[0].Segment != "box/mem0" {
			t.Fatalf("path %d: PutStart replicas %v", i, ps.Replicas)
		}
		if _, err := mc.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "box", Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	// The same question gets the same answer (but the offsets) either way.
	for _, key := range []string{"k0", "k1"} {
		a, err := viaGRPC.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := viaFast.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(a, b) {
			t.Fatalf("%s: gRPC answered %v, fast path %v", key, a, b)
		}
	}
	rl, err := viaFast.GetReplicaList(ctx, &kvtierpb.KeyRequest{Key: []byte("k0")})
	if err != nil || rl.Size != 4096 || rl.Crc32C != 7 || len(rl.Replicas) != 1 {
		t.Fatalf("GetReplicaList over the fast path: %v %v", rl, err)
	}

	// Errors: the same kverr code, key and message through either path.
	_, e1 := viaGRPC.GetReplicaList(ctx, &kvtierpb.KeyRequest{Key: []byte("missing\xff")})
	_, e2 := viaFast.GetReplicaList(ctx, &kvtierpb.KeyRequest{Key: []byte("missing\xff")})
	k1, k2 := kverr.FromGRPC(e1), kverr.FromGRPC(e2)
	if kverr.CodeOf(k1) != kverr.ObjectNotFound || k1.Error() != k2.Error() || status.Code(e1) != status.Code(e2) {
		t.Fatalf("errors differ: gRPC %v (%v), fast %v (%v)", k1, status.Code(e1), k2, status.Code(e2))
	}
	var ke *kverr.Error
	if !errors.As(k2, &ke) || ke.Key != "missing\xff" {
		t.Fatalf("binary key lost on the fast path: %#v", k2)
	}
	if n := c.calls.Load(); n < 10 {
		t.Fatalf("interceptor saw %d calls, want every call of both paths", n)
	}
}

func TestStreamsUseFallback(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	_, viaFast, _ := dialBoth(t, c.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := viaFast.WatchEvents(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream is registered on the master some time after the call
	// returns: keep making events until one arrives.
	got := make(chan *kvtierpb.Event, 1)
	go func() {
		ev, err := st.Recv()
		if err != nil {
			t.Errorf("WatchEvents through the fallback: %v", err)
		}
		got <- ev
	}()
	for i := 0; ; i++ {
		mountSegment(t, viaFast, fmt.Sprintf("box%d", i))
		select {
		case ev := <-got:
			if ev.GetKind() == "" {
				t.Fatalf("empty event %v", ev)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if ctx.Err() != nil {
			t.Fatal("no event within 20s")
		}
	}
}

func TestFallbackWhenServerHasNoFastPath(t *testing.T) {
	c := startCluster(t, false, "127.0.0.1:0")
	_, viaFast, fc := dialBoth(t, c.addr)
	mountSegment(t, viaFast, "box")
	if fastUsed(fc) {
		t.Fatal("a fast-path connection to a gRPC-only server")
	}
	fc.mu.Lock()
	off := time.Until(fc.offUntil)
	fc.mu.Unlock()
	if off < noFastRetry/2 {
		t.Fatalf("fast path not switched off after the hello was refused (%v left)", off)
	}
	if _, err := viaFast.GetObject(context.Background(), &kvtierpb.KeyRequest{Key: []byte("x")}); kverr.CodeOf(kverr.FromGRPC(err)) != kverr.ObjectNotFound {
		t.Fatalf("call through the fallback: %v", err)
	}
}

func TestServerRestartDropsStaleConnections(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	_, viaFast, fc := dialBoth(t, c.addr)
	mountSegment(t, viaFast, "box")
	if !fastUsed(fc) {
		t.Fatal("fast path not used")
	}
	c.stop()
	// Same address, new master: the pooled connection is dead.
	var c2 *cluster
	for i := 0; ; i++ {
		lis, err := net.Listen("tcp", c.addr)
		if err == nil {
			lis.Close()
			c2 = startCluster(t, true, c.addr)
			break
		}
		if i == 50 {
			t.Fatalf("port %s not free again: %v", c.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The first call after the restart must succeed (no stale-connection
	// error) and go over the fast path again.
	if _, err := viaFast.Heartbeat(context.Background(), &kvtierpb.HeartbeatRequest{ClientId: "box"}); err != nil {
		t.Fatalf("first call after a restart: %v", err)
	}
	if c2.calls.Load() != 1 || !fastUsed(fc) {
		t.Fatalf("new server saw %d calls, fast used %v", c2.calls.Load(), fastUsed(fc))
	}
}

func TestHAAddressList(t *testing.T) {
	// A dead address first (a standby does not listen), then the leader.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	c := startCluster(t, true, "127.0.0.1:0")
	gc, err := grpc.NewClient("passthrough:///"+c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	fc, err := Dial(ClientConfig{Addrs: []string{deadAddr, c.addr}, Fallback: gc})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	mountSegment(t, kvtierpb.NewMasterClient(fc), "box")
	fc.mu.Lock()
	next := fc.next
	fc.mu.Unlock()
	if !fastUsed(fc) || next != 1 {
		t.Fatalf("fast used %v, remembered address %d; want the second", fastUsed(fc), next)
	}
}

// slowMaster blocks GetObject until released, for deadline tests.
type slowMaster struct {
	kvtierpb.UnimplementedMasterServer
	release chan struct{}
	sawDL   chan bool
}

func (s *slowMaster) GetObject(ctx context.Context, _ *kvtierpb.KeyRequest) (*kvtierpb.ObjectInfo, error) {
	_, ok := ctx.Deadline()
	s.sawDL <- ok
	select {
	case <-s.release:
		return &kvtierpb.ObjectInfo{Key: []byte("ok")}, nil
	case <-ctx.Done():
		// The server's deadline is the caller's rounded up to the next
		// millisecond: answer well after the caller gave up, so that the
		// test sees the caller's own timeout (an answer that still arrived
		// first would leave a healthy connection, rightly pooled).
		select {
		case <-s.release:
		case <-time.After(200 * time.Millisecond):
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func TestDeadlineAndCancel(t *testing.T) {
	sm := &slowMaster{release: make(chan struct{}), sawDL: make(chan bool, 4)}
	c := serveMaster(t, sm, true, "127.0.0.1:0")
	_, viaFast, fc := dialBoth(t, c.addr)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := viaFast.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte("k")})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v", err)
	}
	if !<-sm.sawDL {
		t.Fatal("the handler's context had no deadline")
	}
	if fastUsed(fc) {
		t.Fatal("a connection whose call timed out went back to the pool")
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { <-sm.sawDL; cancel2() }()
	_, err = viaFast.GetObject(ctx2, &kvtierpb.KeyRequest{Key: []byte("k")})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	close(sm.release)
	// Still usable afterwards, on a fresh connection.
	info, err := viaFast.GetObject(context.Background(), &kvtierpb.KeyRequest{Key: []byte("k")})
	if err != nil || string(info.Key) != "ok" {
		t.Fatalf("call after a cancelled one: %v %v", info, err)
	}
}

// rawFast opens a fast-path connection by hand and exchanges the hello.
func rawFast(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(hello[:]); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	var b [helloLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil || checkHello(b[:]) != nil {
		t.Fatalf("hello answer %x %v", b, err)
	}
	return nc, r
}

func readResponse(t *testing.T, r *bufio.Reader) (byte, []byte) {
	t.Helper()
	var h [respHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatal(err)
	}
	st, n, err := parseResponseHeader(h[:])
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	return st, p
}

func TestBadFrames(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	_, viaFast, _ := dialBoth(t, c.addr)
	mountSegment(t, viaFast, "box")

	// Unknown method and an undecodable request: answered, connection kept.
	nc, r := rawFast(t, c.addr)
	frame, _ := appendRequest(nil, "/kvtier.v1.Master/NoSuchMethod", 0, nil)
	frame, _ = appendRequest(frame, kvtierpb.Master_GetObject_FullMethodName, 0, []byte{0xff, 0xff, 0xff})
	frame, _ = appendRequest(frame, kvtierpb.Master_Stats_FullMethodName, 0, nil)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	for _, want := range []codes.Code{codes.Unimplemented, codes.InvalidArgument} {
		st, p := readResponse(t, r)
		if st != statusError {
			t.Fatalf("want an error frame (%v), got status %d", want, st)
		}
		var sp = status.New(codes.OK, "").Proto()
		if err := proto.Unmarshal(p, sp); err != nil || codes.Code(sp.Code) != want {
			t.Fatalf("error status %v %v, want %v", sp, err, want)
		}
	}
	if st, p := readResponse(t, r); st != statusOK {
		t.Fatalf("Stats after two refusals: status %d %q", st, p)
	}

	// Malformed headers close that connection only.
	for name, bad := range map[string][]byte{
		"magic":    append([]byte("XXXX"), make([]byte, 12)...),
		"method 0": {'K', 'V', 'F', 'Q', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"payload":  append(binary.BigEndian.AppendUint32([]byte{'K', 'V', 'F', 'Q', 0, 1, 0, 0}, MaxPayload+1), 0, 0, 0, 0),
		"reserved": {'K', 'V', 'F', 'Q', 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		nc, r := rawFast(t, c.addr)
		if _, err := nc.Write(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("%s: connection not closed (%v)", name, err)
		}
	}
	// A bad hello is closed too, without an answer.
	nc2, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	_ = nc2.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc2.Write([]byte{'K', 'V', 'F', 'R', 9, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if n, err := nc2.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("bad hello answered with %d bytes (%v)", n, err)
	}
	// Everyone else goes on.
	if _, err := viaFast.Stats(context.Background(), &kvtierpb.Empty{}); err != nil {
		t.Fatalf("other client after bad frames: %v", err)
	}
}

func TestConcurrentCallsBoundedConnections(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	gc, err := grpc.NewClient("passthrough:///"+c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	fc, err := Dial(ClientConfig{Addrs: []string{c.addr}, Fallback: gc, MaxConns: 4, MaxIdle: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	mc := kvtierpb.NewMasterClient(fc)
	mountSegment(t, mc, "box")
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				key := []byte(fmt.Sprintf("g%d/%d", g, i))
				if _, err := mc.PutStart(context.Background(), &kvtierpb.PutStartRequest{ClientId: "box", Key: key, Size: 100}); err != nil {
					errs <- err
					return
				}
				if _, err := mc.PutEnd(context.Background(), &kvtierpb.KeyRequest{ClientId: "box", Key: key}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.fast.mu.Lock()
	open := len(c.fast.conns)
	c.fast.mu.Unlock()
	if open > 4 {
		t.Fatalf("%d fast-path connections open on the server, MaxConns is 4", open)
	}
	st, err := mc.Stats(context.Background(), &kvtierpb.Empty{})
	if err != nil || st.GetObjects() != 640 {
		t.Fatalf("objects after 640 puts: %v %v", st.GetObjects(), err)
	}
}

func TestServerCloseStopsEverything(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	_, viaFast, _ := dialBoth(t, c.addr)
	mountSegment(t, viaFast, "box")
	nc, r := rawFast(t, c.addr)
	_ = nc
	done := make(chan struct{})
	go func() { c.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a fast-path connection open")
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("fast-path connection still open after Close")
	}
	if _, err := net.DialTimeout("tcp", c.addr, time.Second); err == nil {
		t.Fatal("listener still accepting after Close")
	}
}
