package bench

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sinkEnv makes this test binary act as a tcp-process sink (RunSink) when
// StartSink runs it: the size is its last argument.
const sinkEnv = "KVTIER_BENCH_TEST_SINK"

// The test sink's --tcp-sink-listen and --tcp-sink-lands, when set.
const (
	sinkListenEnv = "KVTIER_BENCH_TEST_SINK_LISTEN"
	sinkForceLand = "KVTIER_BENCH_TEST_SINK_LANDS"
)

func TestMain(m *testing.M) {
	if os.Getenv(sinkEnv) == "1" {
		size, _ := strconv.Atoi(os.Args[len(os.Args)-1])
		listen := os.Getenv(sinkListenEnv)
		if listen == "" {
			listen = DefaultSinkListen
		}
		lands := os.Getenv(SinkLandsEnv) == "1" || os.Getenv(sinkForceLand) == "1"
		if err := RunSinkOn(context.Background(), listen, size, lands, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRawTCPProcess runs the tcp-process baseline against a sink in a real
// second process and checks the results are plausible and named.
func TestRawTCPProcess(t *testing.T) {
	t.Setenv(sinkEnv, "1")
	o := Options{Sizes: []int{65536}, Concurrency: []int{1, 2}, Duration: 50 * time.Millisecond,
		SinkCommand: []string{os.Args[0], "-test.run=^$"}}
	rs, err := RunBaseline(context.Background(), BaselineTCPProcess, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for i, r := range rs {
		if r.System != BaselineTCPProcess || r.Op != "send" || r.Size != 65536 || r.Concurrency != o.Concurrency[i] ||
			r.Ops <= 0 || r.Errors != 0 || r.GBytesPerSec <= 0 || r.P50US <= 0 {
			t.Errorf("implausible result %+v", r)
		}
	}
}

func TestStartSinkRefusesBadSinks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"no command", nil, "no sink command"},
		{"missing binary", []string{"/nonexistent/kvtier"}, "start sink"},
		{"wrong banner", []string{"sh", "-c", "echo hello; cat >/dev/null", "sh"}, "sink printed"},
		{"exits at once", []string{"true"}, "sink printed"},
	} {
		addr, stop, err := StartSink(ctx, tc.argv, 4096)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: StartSink = %q, %v; want an error containing %q", tc.name, addr, err, tc.want)
		}
		if stop != nil {
			t.Errorf("%s: a stop function came with the error", tc.name)
		}
	}
}

// A sink started on another host listens where the sender reaches it (a
// second loopback address stands in for the appliance's host here), and
// its banner names that address.
func TestSinkListensWhereTold(t *testing.T) {
	t.Setenv(sinkEnv, "1")
	t.Setenv(sinkListenEnv, "127.0.0.2:0")
	argv := []string{os.Args[0], "-test.run=^$"}
	addr, stop, err := StartSink(context.Background(), argv, 4096)
	if err != nil {
		t.Skipf("no second loopback address here: %v", err)
	}
	if !strings.HasPrefix(addr, "127.0.0.2:") {
		t.Errorf("sink at %s, told 127.0.0.2:0", addr)
	}
	r, err := sendTCP(context.Background(), addr, 4096, 2, 50*time.Millisecond, nil)
	if err2 := stop(); err == nil {
		err = err2
	}
	if err != nil || r.Ops <= 0 || r.Errors != 0 {
		t.Fatalf("sending to the sink at %s: %+v, %v", addr, r, err)
	}
	for _, bad := range []string{"0.0.0.0:0", ":0", "[::]:0", "127.0.0.1"} {
		err := RunSinkOn(context.Background(), bad, 4096, false, strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "sink address") {
			t.Errorf("RunSinkOn(%q) = %v, want a refusal of the address", bad, err)
		}
	}
}

// The store baseline needs a sink that lands its messages; a sink command
// that crosses to another host does not carry the environment that asks
// for it, so the banner says whether the sink lands, and a mismatch is an
// error naming the flag, never a baseline measured the wrong way.
func TestSinkLandingMismatchRefused(t *testing.T) {
	t.Setenv(sinkEnv, "1")
	// env -u: a command that drops SinkLandsEnv, as ssh would.
	argv := []string{"env", "-u", SinkLandsEnv, os.Args[0], "-test.run=^$"}
	_, stop, err := startSink(context.Background(), argv, 4096, true)
	if err == nil || !strings.Contains(err.Error(), "add --tcp-sink-lands") {
		t.Errorf("a sink that does not land, for the store baseline: %v", err)
	}
	if stop != nil {
		t.Error("a stop function came with the error")
	}
	t.Setenv(sinkForceLand, "1")
	if _, _, err := startSink(context.Background(), argv, 4096, false); err == nil || !strings.Contains(err.Error(), "drop --tcp-sink-lands") {
		t.Errorf("a landing sink, for a baseline that does not land: %v", err)
	}
	addr, stop, err := startSink(context.Background(), argv, 4096, true)
	if err != nil {
		t.Fatalf("a sink told to land by its flag, for the store baseline: %v", err)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Errorf("address %q: %v", addr, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestServeSinkStopsOnCancel: cancelling closes the listener and the
// connections, and ServeSink returns once its goroutines are done.
func TestServeSinkStopsOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeSink(ctx, ln, 8) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("12345678")); err != nil {
		t.Fatal(err)
	}
	var ack [1]byte
	if _, err := c.Read(ack[:]); err != nil || ack[0] != 1 {
		t.Fatalf("ack %v %v", ack, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeSink after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeSink did not return after cancel")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(ack[:]); err == nil {
		t.Error("the connection stayed open after cancel")
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ServeSink(context.Background(), ln2, 0); err == nil {
		t.Error("size 0 accepted")
	}
	if _, err := ln2.Accept(); err == nil {
		t.Error("a refused sink left its listener open")
	}
}
