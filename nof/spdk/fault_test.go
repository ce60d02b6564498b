package spdk_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
)

func rawRecording(t *testing.T, name string) []byte {
	t.Helper()
	e, err := spdktest.Recording(name)
	if err != nil {
		t.Fatal(err)
	}
	return e.Response
}

// The server closes the connection the way SPDK does after a parse error
// (recordings 39/41: nothing comes back). The call fails with ErrConnLost and
// the next call reconnects.
func TestConnectionClosedMidCallThenReconnect(t *testing.T) {
	s := replayServer(t, spdktest.Options{CloseOn: "framework_wait_init"})
	c := newClient(t, s.Path())
	ctx := context.Background()
	if _, err := c.SpdkGetVersion(ctx); err != nil {
		t.Fatal(err)
	}
	err := c.FrameworkWaitInit(ctx)
	if !errors.Is(err, spdk.ErrConnLost) {
		t.Fatalf("want ErrConnLost, got %v", err)
	}
	v, err := c.SpdkGetVersion(ctx)
	if err != nil || v.Version != "SPDK v26.05" {
		t.Fatalf("after reconnect: %v %+v", err, v)
	}
	if st := c.Stats(); st.Reconnects != 1 {
		t.Fatalf("reconnects = %d, want 1", st.Reconnects)
	}
}

// All calls outstanding on a connection fail when it drops; none hangs.
func TestDropFailsAllPending(t *testing.T) {
	s := replayServer(t, spdktest.Options{Hold: 1000}) // never replies
	c := newClient(t, s.Path())
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() { errs <- c.FrameworkWaitInit(context.Background()) }()
	}
	for len(s.Received()) < n {
		time.Sleep(time.Millisecond)
	}
	s.DropConns()
	for range n {
		if err := <-errs; !errors.Is(err, spdk.ErrConnLost) {
			t.Fatalf("want ErrConnLost, got %v", err)
		}
	}
}

// A reply with id null (recording 37's bytes) is attributed to the only
// outstanding call, with its code and message.
func TestNullIDErrorSoleCall(t *testing.T) {
	s := replayServer(t, spdktest.Options{Override: map[string][]byte{
		"spdk_get_version": rawRecording(t, "37-proto-wrong-version")}})
	c := newClient(t, s.Path())
	_, err := c.SpdkGetVersion(context.Background())
	var re *spdk.RPCError
	if !errors.As(err, &re) || re.Code != spdk.CodeInvalidRequest || re.Message != "Invalid request" || re.Method != "spdk_get_version" {
		t.Fatalf("got %v", err)
	}
}

// A reply carrying an id we never sent (recording 32's string id) is counted
// as an orphan and does not satisfy the call, which ends at its deadline.
func TestForeignIDIsOrphan(t *testing.T) {
	s := replayServer(t, spdktest.Options{Override: map[string][]byte{
		"spdk_get_version": rawRecording(t, "32-proto-string-id")}})
	c := newClient(t, s.Path())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.SpdkGetVersion(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if st := c.Stats(); st.Orphans != 1 {
		t.Fatalf("orphans = %d", st.Orphans)
	}
	// The connection is still usable.
	if err := c.FrameworkWaitInit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A call abandoned by its context gets its reply later; the reply is counted
// and dropped, and the next call still gets its own reply.
func TestLateReplyAfterCancel(t *testing.T) {
	s := replayServer(t, spdktest.Options{Hold: 2})
	c := newClient(t, s.Path())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.SpdkGetVersion(ctx); done <- err }()
	for len(s.Received()) < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if err := c.FrameworkWaitInit(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The held reply to the cancelled call arrived in the same write (first,
	// since the server reverses); wait for the reader to count it.
	for c.Stats().LateReplies != 1 {
		time.Sleep(time.Millisecond)
	}
}

func TestServerRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spdk.sock")
	ex, _ := spdktest.Recordings()
	rp, _ := spdktest.NewReplay(ex)
	s, err := spdktest.Listen(path, rp.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, path)
	ctx := context.Background()
	if err := c.FrameworkWaitInit(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// While SPDK is down, calls fail quickly with the dial error.
	if err := c.FrameworkWaitInit(ctx); err == nil {
		t.Fatal("call succeeded with no server")
	} else if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, spdk.ErrConnLost) {
		t.Fatalf("unexpected error %v", err)
	}
	s2, err := spdktest.Listen(path, rp.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var lastErr error
	for range 3 { // the first call may still see the old, dead connection
		if lastErr = c.FrameworkWaitInit(ctx); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("after restart: %v", lastErr)
	}
}

func TestDialMissingSocket(t *testing.T) {
	_, err := spdk.Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock"))
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("got %v", err)
	}
}

func TestClosedClient(t *testing.T) {
	s := replayServer(t, spdktest.Options{Hold: 1000})
	c := newClient(t, s.Path())
	done := make(chan error, 1)
	go func() { done <- c.FrameworkWaitInit(context.Background()) }()
	for len(s.Received()) < 1 {
		time.Sleep(time.Millisecond)
	}
	c.Close()
	if err := <-done; !errors.Is(err, spdk.ErrClosed) {
		t.Fatalf("pending call: %v", err)
	}
	if err := c.FrameworkWaitInit(context.Background()); !errors.Is(err, spdk.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// Bad input is refused before anything is sent.
func TestBadParamsNotSent(t *testing.T) {
	s := replayServer(t, spdktest.Options{})
	c := newClient(t, s.Path())
	ctx := context.Background()
	for _, p := range []any{5, "x", true} {
		if err := c.Call(ctx, "spdk_get_version", p, nil); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("params %v: got %v", p, err)
		}
	}
	if err := c.Call(ctx, "", nil, nil); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("empty method: %v", err)
	}
	if err := c.Call(ctx, "spdk_get_version", map[string]any{"f": func() {}}, nil); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("unencodable: %v", err)
	}
	if n := len(s.Received()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	if _, err := spdk.New(spdk.Config{MaxReply: -1}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("bad config: %v", err)
	}
}

// Garbage or a malformed reply on the stream kills the connection; the call
// fails with ErrConnLost rather than hanging or decoding nonsense.
func TestMalformedReplyStream(t *testing.T) {
	for name, raw := range map[string]string{
		"garbage":     "hello\n",
		"both":        `{"jsonrpc":"2.0","id":1,"result":true,"error":{"code":1,"message":"x"}}` + "\n",
		"neither":     `{"jsonrpc":"2.0","id":1}` + "\n",
		"bad-version": `{"jsonrpc":"1.0","id":1,"result":true}` + "\n",
		"bad-error":   `{"jsonrpc":"2.0","id":1,"error":"boom"}` + "\n",
	} {
		s := replayServer(t, spdktest.Options{Override: map[string][]byte{"framework_wait_init": []byte(raw)}})
		c := newClient(t, s.Path())
		err := c.FrameworkWaitInit(context.Background())
		if !errors.Is(err, spdk.ErrConnLost) {
			t.Fatalf("%s: got %v", name, err)
		}
	}
	// A well-formed reply whose result has the wrong type is ErrBadReply for
	// that call only.
	s := replayServer(t, spdktest.Options{Override: map[string][]byte{
		"framework_wait_init": []byte(`{"jsonrpc":"2.0","id":1,"result":"yes"}` + "\n")}})
	c := newClient(t, s.Path())
	if err := c.FrameworkWaitInit(context.Background()); !errors.Is(err, spdk.ErrBadReply) {
		t.Fatalf("got %v", err)
	}
	if _, err := c.SpdkGetVersion(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Many callers while the server keeps dropping connections: every call ends
// with its own correct result or ErrConnLost, never another call's reply.
func TestStressDrops(t *testing.T) {
	s := replayServer(t, spdktest.Options{Chunk: 50})
	c := newClient(t, s.Path())
	ctx := context.Background()
	stop := make(chan struct{})
	dropped := make(chan struct{})
	go func() {
		defer close(dropped)
		for {
			select {
			case <-stop:
				return
			default:
				s.DropConns()
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 40 {
				var err error
				if (g+i)%2 == 0 {
					var v spdk.Version
					v, err = c.SpdkGetVersion(ctx)
					if err == nil && v.Version != "SPDK v26.05" {
						err = errors.New("wrong reply for spdk_get_version")
					}
				} else {
					var b []spdk.Bdev
					b, err = c.BdevGetBdevs(ctx, spdk.BdevGetBdevsParams{Name: "Malloc0"})
					if err == nil && (len(b) != 1 || b[0].Name != "Malloc0") {
						err = errors.New("wrong reply for bdev_get_bdevs")
					}
				}
				if err != nil && !errors.Is(err, spdk.ErrConnLost) {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	<-dropped
	if c.Stats().Reconnects == 0 {
		t.Log("no reconnect happened (drops raced ahead of calls)")
	}
}
