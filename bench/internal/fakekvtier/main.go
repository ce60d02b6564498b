package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/bench"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakekvtier:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int, error) {
	mult := 1
	for _, u := range []struct {
		suf string
		m   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: fakekvtier standalone|master|appliance|bench ...")
	}
	switch args[0] {
	case "standalone":
		return standalone()
	case "master":
		return serve("listening grpc=%s http=%s\n", 2)
	case "appliance":
		return serve("listening data=%s name=fake\n", 1)
	case "bench":
		return benchCmd(args[1:])
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func standalone() error {
	var lns []net.Listener
	for i := 0; i < 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		lns = append(lns, ln)
	}
	fmt.Printf("listening grpc=%s http=%s data=%s\n", lns[0].Addr(), lns[1].Addr(), lns[2].Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

// serve listens on n loopback ports, prints line with their addresses (as
// the real master and appliance do) and waits for SIGINT or SIGTERM; it
// ignores its flags.
func serve(line string, n int) error {
	addrs := make([]any, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		addrs[i] = ln.Addr()
	}
	fmt.Printf(line, addrs...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

func benchCmd(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	master := fs.String("master", "", "")
	jsonOut := fs.Bool("json", false, "")
	op := fs.String("op", "put", "")
	size := fs.String("size", "64KiB", "")
	conc := fs.Int("concurrency", 1, "")
	dur := fs.Duration("duration", time.Second, "")
	baseline := fs.String("baseline", "", "")
	report := fs.String("report", "", "")
	tcpSink := fs.Int("tcp-sink", 0, "")
	beside := fs.String("beside", "", "")
	rounds := fs.Int("rounds", 0, "")
	_ = fs.Bool("shm", true, "accepted like the real CLI; the map store has no transport")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *report != "" {
		return bench.Report(*report)
	}
	if *tcpSink != 0 {
		return bench.RunSink(context.Background(), *tcpSink, os.Stdin, os.Stdout)
	}
	sz, err := parseSize(*size)
	if err != nil {
		return err
	}
	o := bench.Options{Ops: []string{*op}, Sizes: []int{sz}, Concurrency: []int{*conc}, Duration: *dur, Beside: *beside, Rounds: *rounds}
	if bench.NeedsSink(*baseline) || bench.NeedsSink(*beside) {
		if o.SinkCommand, err = bench.SelfSink(); err != nil {
			return err
		}
	}
	var rs []bench.Result
	switch {
	case *baseline != "":
		rs, err = bench.RunBaseline(context.Background(), *baseline, o)
	case *master != "":
		rs, err = bench.Run(context.Background(), o, newFakeMapStore(), os.Stderr)
	default:
		return fmt.Errorf("need --master, --baseline or --report")
	}
	if err != nil {
		return err
	}
	if !*jsonOut {
		return fmt.Errorf("only --json is faked")
	}
	return bench.WriteJSONLines(os.Stdout, rs)
}

// fakeMapStore is a process-local map standing in for a kvtier cluster.
type fakeMapStore struct {
	mu   sync.Mutex
	data map[string][]byte // guarded by mu
}

var _ bench.Store = (*fakeMapStore)(nil)

func newFakeMapStore() *fakeMapStore { return &fakeMapStore{data: map[string][]byte{}} }

func (s *fakeMapStore) Put(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[k]; !ok && len(s.data) < 2048 {
		s.data[k] = append([]byte(nil), v...)
	}
	return nil
}

func (s *fakeMapStore) Get(ctx context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[k]
	if !ok {
		return nil, fmt.Errorf("not found")
	}
	return append([]byte(nil), v...), nil
}

func (s *fakeMapStore) GetInto(_ context.Context, k string, b []byte) (int, error) {
	s.mu.Lock()
	v, ok := s.data[k]
	s.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("not found")
	}
	return copy(b, v), nil
}

func (s *fakeMapStore) Exist(_ context.Context, k string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.data[k]
	return ok, nil
}

func (s *fakeMapStore) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i], _ = s.Exist(ctx, k)
	}
	return out, nil
}

func (s *fakeMapStore) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	vals, errs := make([][]byte, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		vals[i], errs[i] = s.Get(ctx, k)
	}
	return vals, errs
}

func (s *fakeMapStore) BatchPut(ctx context.Context, keys []string, values [][]byte) []error {
	errs := make([]error, len(keys))
	for i, k := range keys {
		errs[i] = s.Put(ctx, k, values[i])
	}
	return errs
}
