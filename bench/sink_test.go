package bench

import (
	"context"
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

func TestMain(m *testing.M) {
	if os.Getenv(sinkEnv) == "1" {
		size, _ := strconv.Atoi(os.Args[len(os.Args)-1])
		if err := RunSink(context.Background(), size, os.Stdin, os.Stdout); err != nil {
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
