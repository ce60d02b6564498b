package bench

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/bench/hdr"
)

// stampedStore is a testMemStore that notes when each Put ran.
type stampedStore struct {
	*testMemStore
	mu    sync.Mutex
	times []time.Time // guarded by mu
}

func (s *stampedStore) Put(ctx context.Context, k string, v []byte) error {
	s.mu.Lock()
	s.times = append(s.times, time.Now())
	s.mu.Unlock()
	time.Sleep(200 * time.Microsecond) // a call that takes time, as a real put does
	return s.testMemStore.Put(ctx, k, v)
}

// TestRunBesideInTurns measures puts beside the tcp baseline in 4 rounds,
// which alternate their order (kvtier first, then the baseline first): the
// store is called in 3 bursts, K BB KK BB K, with the baseline's turns
// between them,
// the kvtier figures cover only kvtier's turns, and the result carries the
// baseline's rate and the ratios, which the report uses in place of a
// separate baseline run.
func TestRunBesideInTurns(t *testing.T) {
	s := &stampedStore{testMemStore: newTestMemStore()}
	const d, rounds = 800 * time.Millisecond, 4
	o := Options{Ops: []string{OpPut}, Sizes: []int{64 << 10}, Concurrency: []int{2}, Duration: d, KeyPrefix: "t/",
		Beside: BaselineTCP, Rounds: rounds}
	start := time.Now()
	rs, err := Run(context.Background(), o, s, nil)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Beside != BaselineTCP || r.Rounds != rounds || r.BesideGBytesPerSec <= 0 || r.BesideP50US <= 0 {
		t.Fatalf("no baseline figures in %+v", r)
	}
	if want := r.GBytesPerSec / r.BesideGBytesPerSec; r.VsBeside < want*0.999 || r.VsBeside > want*1.001 {
		t.Errorf("over_beside %v, want %v", r.VsBeside, want)
	}
	// The whole ratio is a mean of the rounds' (turns of equal length).
	if r.VsBesideMin <= 0 || r.VsBesideMin > r.VsBesideMax || r.VsBeside < r.VsBesideMin*0.9 || r.VsBeside > r.VsBesideMax*1.1 {
		t.Errorf("round ratios %v-%v against the whole %v", r.VsBesideMin, r.VsBesideMax, r.VsBeside)
	}
	// kvtier's seconds are its own turns; the run also spent the
	// baseline's.
	if r.Seconds < d.Seconds()*0.95 || r.Seconds > d.Seconds()*1.5 {
		t.Errorf("kvtier measured %.2f s, want about %v", r.Seconds, d)
	}
	if took < 2*d*95/100 {
		t.Errorf("run took %v: the baseline's turns did not run (want about %v)", took, 2*d)
	}
	// Three bursts of puts: two pauses of two baseline turns between them.
	s.mu.Lock()
	times := slices.Clone(s.times)
	s.mu.Unlock()
	turn := d / rounds
	var gaps int
	for i := 1; i < len(times); i++ {
		if times[i].Sub(times[i-1]) > turn {
			gaps++
		}
	}
	if gaps != rounds/2 {
		t.Errorf("%d pauses between the store's puts, want %d (K BB KK BB K)", gaps, rounds/2)
	}
	q := Ratios(rs)[0]
	if !q.InTurns || q.TCPGBps != r.BesideGBytesPerSec || q.VsTCP != r.VsBeside || q.TCPProcessGBps != 0 {
		t.Errorf("report ratio %+v does not use the turns' baseline", q)
	}
	var md strings.Builder
	if err := WriteMarkdown(&md, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "†") || !strings.Contains(md.String(), "measured in turns") {
		t.Errorf("report does not mark the ratio as measured in turns:\n%s", md.String())
	}
}

// TestRunBesideTCPProcess runs gets beside a sink in a second process.
func TestRunBesideTCPProcess(t *testing.T) {
	t.Setenv(sinkEnv, "1")
	o := Options{Ops: []string{OpGet}, Sizes: []int{64 << 10}, Concurrency: []int{1}, Duration: 400 * time.Millisecond,
		KeyBudgetBytes: 1 << 20, Beside: BaselineTCPProcess, SinkCommand: []string{os.Args[0], "-test.run=^$"}}
	rs, err := Run(context.Background(), o, newTestMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Beside != BaselineTCPProcess || r.Rounds != DefaultRounds || r.BesideGBytesPerSec <= 0 || r.VsBeside <= 0 {
		t.Fatalf("no baseline figures in %+v", r)
	}
	if q := Ratios(rs)[0]; !q.InTurns || q.TCPProcessGBps != r.BesideGBytesPerSec || q.TCPGBps != 0 {
		t.Errorf("report ratio %+v does not use the turns' baseline", q)
	}
	// An exist moves no bytes: it runs alone, with no ratio to a transfer.
	o.Ops = []string{OpExist}
	rs, err = Run(context.Background(), o, newTestMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := rs[0]; e.Ops <= 0 || e.Beside != "" || e.VsBeside != 0 || e.Rounds != 0 {
		t.Errorf("exist measured beside a baseline: %+v", e)
	}
}

func TestBesideOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Rounds: 3}, "give beside too"},
		{Options{Beside: "redis"}, "want tcp, tcp-process, tcp-process-cold or tcp-process-store"},
		{Options{Beside: BaselineTCPProcess}, "sink command"},
		{Options{Beside: BaselineTCP, Rounds: -1}, "negative"},
		{Options{Beside: BaselineTCP, Duration: time.Second, Rounds: 20}, "turns under"},
	} {
		s := newTestMemStore()
		_, err := Run(context.Background(), tc.o, s, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.o, err, tc.want)
		}
		if len(s.calls) != 0 {
			t.Errorf("%+v: refused options still called the store: %v", tc.o, s.calls)
		}
	}
}

// TestTCPProcessCold runs the cold baseline alone and beside a workload:
// its sender sends from a working set of at least DefaultKeyBudgetBytes
// and four messages, message after message, named tcp-process-cold in
// the results and marked cold in the report.
func TestTCPProcessCold(t *testing.T) {
	t.Setenv(sinkEnv, "1")
	sink := []string{os.Args[0], "-test.run=^$"}
	for _, size := range []int{64 << 10, 100 << 20} {
		set := coldWorkingSet(size)
		if len(set) < 4*size || len(set) < DefaultKeyBudgetBytes-size || len(set)%size != 0 {
			t.Errorf("working set of %d B for messages of %d B: want >= 4 messages and ~%d B, whole messages", len(set), size, DefaultKeyBudgetBytes)
		}
	}
	rs, err := RunBaseline(context.Background(), BaselineTCPProcessCold, Options{Sizes: []int{1 << 20}, Concurrency: []int{2},
		Duration: 300 * time.Millisecond, SinkCommand: sink})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs[0]; r.System != BaselineTCPProcessCold || r.Ops <= 0 || r.GBytesPerSec <= 0 {
		t.Fatalf("implausible cold baseline %+v", r)
	}
	// Every message came from the working set in turn: the senders'
	// counter passed as many messages as were acknowledged.
	s, err := func() (*tcpSenders, error) {
		ctx := context.Background()
		addr, stop, err := StartSink(ctx, sink, 64<<10)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = stop() })
		return dialSenders(ctx, addr, 64<<10, 2, coldWorkingSet(64<<10))
	}()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var h hdr.Histogram
	ops, _, _, err := s.run(context.Background(), 100*time.Millisecond, &h)
	if err != nil || ops <= 0 || s.next.Load() != uint64(ops) {
		t.Fatalf("cold sends: %d acknowledged, %d taken from the working set (%v)", ops, s.next.Load(), err)
	}

	checkBesideMarked(t, OpGet, BaselineTCPProcessCold, sink, "cold")
}

// checkBesideMarked runs an op workload beside baseline against a map
// store and checks that the result carries the baseline's figures and the
// report marks the turns with mark.
func checkBesideMarked(t *testing.T, op, baseline string, sink []string, mark string) {
	t.Helper()
	rs, err := Run(context.Background(), Options{Ops: []string{op}, Sizes: []int{64 << 10}, Duration: 400 * time.Millisecond,
		KeyBudgetBytes: 1 << 20, Beside: baseline, Rounds: 2, SinkCommand: sink}, newTestMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Beside != baseline || rs[0].VsBeside <= 0 {
		t.Fatalf("no %s baseline figures in %+v", baseline, rs[0])
	}
	var md strings.Builder
	if err := WriteMarkdown(&md, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "† "+mark) {
		t.Errorf("report does not mark the turns' baseline as %s:\n%s", mark, md.String())
	}
}

// TestBesideTurnFailsOnALostConnection: a baseline connection that breaks
// during a turn fails the turn instead of leaving a lower rate from the
// survivors (which would flatter kvtier's ratio).
func TestBesideTurnFailsOnALostConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 4096
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, size)
				for i := 0; ; i++ {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if n == 0 && i == 10 {
						return // the first connection breaks after 10 messages
					}
					if _, err := c.Write([]byte{1}); err != nil {
						return
					}
				}
			}()
		}
	}()
	s, err := dialSenders(context.Background(), ln.Addr().String(), size, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &besideSession{name: BaselineTCP, senders: s, stop: func() error { return nil }, size: size}
	defer b.close()
	_, err = b.round(context.Background(), 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 connections failed") {
		t.Fatalf("turn with a broken connection: %v, want an error saying 1 of 2 connections failed", err)
	}
}

// TestSinkLandsMessagesInTurn: a landing sink (tcp-process-store) puts
// message after message at the next place of its working set, wrapping
// around, and acknowledges each once it has landed; a second connection's
// messages land whole too (each connection takes the next place when it
// starts waiting for a message, so which place is not fixed).
func TestSinkLandsMessagesInTurn(t *testing.T) {
	const size, slots = 4096, 4
	land := make([]byte, slots*size)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveSink(ctx, ln, size, land) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	send := func(c net.Conn, b byte) {
		t.Helper()
		if _, err := c.Write(bytes.Repeat([]byte{b}, size)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	whole := func(slot int, b byte) bool {
		return bytes.Count(land[slot*size:(slot+1)*size], []byte{b}) == size
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for m := range 2*slots + 1 {
		send(c, byte(m+1))
		if !whole(m%slots, byte(m+1)) {
			t.Fatalf("message %d did not land whole in slot %d (first byte %d)", m, m%slots, land[m%slots*size])
		}
	}
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	send(c2, 0xEE)
	found := false
	for slot := range slots {
		found = found || whole(slot, 0xEE)
	}
	if !found {
		t.Fatal("the second connection's message landed nowhere whole")
	}
}

// TestTCPProcessStore runs the store baseline alone and beside a workload,
// against a sink in a real second process that StartSink told to land its
// messages; the results are named tcp-process-store and the report marks
// them "store".
func TestTCPProcessStore(t *testing.T) {
	// The sink's environment carries the instruction to land (this
	// stand-in prints it as its address, and says it lands).
	addr, stop, err := startSink(context.Background(), []string{"sh", "-c", `echo "sink lands=$` + SinkLandsEnv + SinkLands + `"; cat >/dev/null`, "sh"}, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if addr != "lands=1" {
		t.Fatalf("the sink saw %q, want lands=1", addr)
	}

	t.Setenv(sinkEnv, "1")
	sink := []string{os.Args[0], "-test.run=^$"}
	rs, err := RunBaseline(context.Background(), BaselineTCPProcessStore, Options{Sizes: []int{1 << 20}, Concurrency: []int{2},
		Duration: 300 * time.Millisecond, SinkCommand: sink})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs[0]; r.System != BaselineTCPProcessStore || r.Ops <= 0 || r.Errors != 0 || r.GBytesPerSec <= 0 {
		t.Fatalf("implausible store baseline %+v", r)
	}
	checkBesideMarked(t, OpPut, BaselineTCPProcessStore, sink, "store")
}

// TestLandingSinkFaultsItsWorkingSetBeforeTheBanner: the sender starts its
// clock when the sink prints its address, so a landing sink must have its
// working set in memory by then (first touch of 256 MiB takes most of a
// second, which would have slowed the baseline's first turn and flattered
// kvtier's ratio).
func TestLandingSinkFaultsItsWorkingSetBeforeTheBanner(t *testing.T) {
	t.Setenv(SinkLandsEnv, "1")
	const size = 3 << 20
	need := max(DefaultKeyBudgetBytes/size, 4) * size
	coldMu.Lock()
	coldSet = nil // as in a fresh sink process (other tests grew it)
	coldMu.Unlock()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- RunSink(context.Background(), size, inR, outW) }()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, SinkBanner) {
		t.Fatalf("banner %q, %v", line, err)
	}
	coldMu.Lock()
	have := len(coldSet)
	coldMu.Unlock()
	if have < need/size*size {
		t.Errorf("at the banner the working set held %d B, want >= %d", have, need/size*size)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
