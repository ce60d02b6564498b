package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/rest"
)

// Failure visibility (issue 14, items 5 and 9): real processes, default
// liveness settings (1 s appliance heartbeats, 10 s client TTL), so the
// seconds measured are the ones an operator gets.

// startDefaultCluster starts a master with the default liveness settings.
func startDefaultCluster(t *testing.T, extra ...string) *cluster {
	args := append([]string{"master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, extra...)
	m := start(t, "master", args...)
	return &cluster{t: t, master: m, grpc: m.addrs["grpc"], http: m.addrs["http"]}
}

// eventLog collects the master's operator events from its SSE stream.
type eventLog struct {
	mu  sync.Mutex
	evs []rest.EventJSON
}

func watchEvents(t *testing.T, c *cluster) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+c.http+"/api/v1/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			var ev rest.EventJSON
			if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil {
				l.mu.Lock()
				l.evs = append(l.evs, ev)
				l.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); res.Body.Close(); <-done })
	return l
}

// find returns the events matching pred.
func (l *eventLog) find(pred func(rest.EventJSON) bool) []rest.EventJSON {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []rest.EventJSON
	for _, ev := range l.evs {
		if pred(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func httpJSON(t *testing.T, url string, v any) int {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.StatusCode
}

func (c *cluster) ready(t *testing.T) (rest.ReadyJSON, int) {
	var r rest.ReadyJSON
	code := httpJSON(t, "http://"+c.http+"/api/v1/ready", &r)
	return r, code
}

// applianceUp reads kvtier_appliance_up{appliance=name} from /metrics (-1:
// absent).
func (c *cluster) applianceUp(t *testing.T, name string) int {
	t.Helper()
	res, err := http.Get("http://" + c.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^kvtier_appliance_up\{appliance="` + regexp.QuoteMeta(name) + `"\} (\S+)$`).FindSubmatch(body)
	switch {
	case m == nil:
		return -1
	case string(m[1]) == "1":
		return 1
	}
	return 0
}

// Stop an appliance (SIGKILL: silence; SIGTERM: a goodbye): within 3 s the
// master reports the cluster degraded naming it, the up gauge drops, an
// event names it, reads of two-replica keys use the surviving appliance,
// and keys only it held miss cleanly (Exist no, OBJECT_NOT_FOUND naming
// it), never "exists" followed by a transfer failure.
func TestStoppedApplianceVisibleWithinSeconds(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { stoppedApplianceVisible(t, sig) })
	}
}

func stoppedApplianceVisible(t *testing.T, sig syscall.Signal) {
	c := startDefaultCluster(t)
	a := c.appliance("box-a", "--dram", "64MiB")
	c.appliance("box-b", "--dram", "64MiB")
	events := watchEvents(t, c)
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	vals := map[string][]byte{}
	for i := range 8 {
		k := fmt.Sprintf("both/%d", i)
		vals[k] = randomBytes(uint64(i+1), 64<<10+i)
		if err := cl.Put(ctx, k, vals[k], client.WithReplicas(2)); err != nil {
			t.Fatal(err)
		}
		info, err := cl.Stat(ctx, k)
		if err != nil || len(info.Replicas) != 2 || info.Replicas[0].Node == info.Replicas[1].Node {
			t.Fatalf("%s not on two appliances: %v %v", k, info, err)
		}
	}
	var onlyA []string
	for i := range 8 {
		k := fmt.Sprintf("a-only/%d", i)
		if err := cl.Put(ctx, k, []byte(k), client.WithOptions(client.PutOptions{Replicas: 1, PreferredSegment: "box-a/mem0"})); err != nil {
			t.Fatal(err)
		}
		if info, _ := cl.Stat(ctx, k); info == nil || info.Replicas[0].Node != "box-a" {
			t.Fatalf("%s not on box-a: %v", k, info)
		}
		onlyA = append(onlyA, k)
	}
	eventually(t, 5*time.Second, "ready, not degraded, both appliances up", func() bool {
		r, code := c.ready(t)
		return code == 200 && r.Ready && !r.Degraded && c.applianceUp(t, "box-a") == 1 && c.applianceUp(t, "box-b") == 1
	})

	stopped := time.Now()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var r rest.ReadyJSON
	eventually(t, 3*time.Second, "/ready degraded naming box-a, gauge 0, an event naming it", func() bool {
		var code int
		r, code = c.ready(t)
		named := len(events.find(func(ev rest.EventJSON) bool {
			return ev.Kind == "client" && ev.Node == "box-a" && (strings.Contains(ev.Message, "suspect") || strings.Contains(ev.Message, "left"))
		})) > 0
		return code == 200 && r.Ready && r.Degraded && len(r.Reasons) == 1 && strings.Contains(r.Reasons[0], "box-a") &&
			c.applianceUp(t, "box-a") == 0 && c.applianceUp(t, "box-b") == 1 && named
	})
	t.Logf("%v: degraded after %v: %q", sig, time.Since(stopped).Round(10*time.Millisecond), r.Reasons)
	want := "suspect"
	if sig == syscall.SIGTERM {
		want = "left"
	}
	if !strings.Contains(r.Reasons[0], want) {
		t.Fatalf("reason %q does not say %q", r.Reasons[0], want)
	}

	// Reads: the survivor serves every two-replica key, byte-exact.
	for k, v := range vals {
		got, err := cl.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s with box-a down: %v", k, err)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("get %s: bytes differ", k)
		}
	}
	// Keys only box-a held: a clean miss, and Exist agrees. Killed, its
	// replicas are kept (it may come back) and the miss names it; stopped,
	// it unmounted its DRAM on the way out, so they are gone for good.
	for _, k := range onlyA {
		ok, err := cl.Exist(ctx, k)
		if err != nil || ok {
			t.Fatalf("exist %s with its only appliance down: %v %v", k, ok, err)
		}
		_, err = cl.Get(ctx, k)
		if !kverr.Is(err, kverr.ObjectNotFound) || sig == syscall.SIGKILL && !strings.Contains(err.Error(), "box-a") {
			t.Fatalf("get %s: %v, want OBJECT_NOT_FOUND (naming box-a when killed)", k, err)
		}
	}
	if sig == syscall.SIGKILL { // stat shows the replica kept but not served
		out, errOut, code := c.cli(t, nil, "stat", onlyA[0])
		if code != 0 || !strings.Contains(out, "node box-a down: not served") {
			t.Fatalf("kvtier stat %s: %q %s", onlyA[0], out, errOut)
		}
	}
	out, _, code := c.cli(t, nil, "exist", onlyA[0])
	if code != 1 || strings.TrimSpace(out) != "absent" {
		t.Fatalf("kvtier exist %s: %q (exit %d), want absent (exit 1)", onlyA[0], out, code)
	}
}

// One-shot CLI calls leave no client row and no liveness events behind, nor
// does an SDK caller that closes.
func TestCLICallsAreNotNodes(t *testing.T) {
	c := startDefaultCluster(t)
	c.appliance("box-a", "--dram", "64MiB")
	events := watchEvents(t, c)
	f := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(f, []byte("value"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		k := fmt.Sprintf("cli/%d", i)
		if _, errOut, code := c.cli(t, nil, "put", k, f); code != 0 {
			t.Fatalf("put: %s", errOut)
		}
		if out, errOut, code := c.cli(t, nil, "get", k); code != 0 || out != "value" {
			t.Fatalf("get: %q %s", out, errOut)
		}
	}
	// An SDK caller that closes says goodbye: no row either.
	sdk, err := client.New(context.Background(), client.Config{MasterAddr: c.grpc, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sdk.Put(context.Background(), "sdk/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := sdk.Close(); err != nil {
		t.Fatal(err)
	}
	// Past the suspect threshold of any client that beat once.
	time.Sleep(3 * time.Second)
	var cl struct{ Clients []rest.ClientJSON }
	httpJSON(t, "http://"+c.http+"/api/v1/clients", &cl)
	if len(cl.Clients) != 1 || cl.Clients[0].ID != "box-a" || cl.Clients[0].State != "live" {
		t.Fatalf("clients after ten CLI calls and a closed SDK caller: %+v", cl.Clients)
	}
	if evs := events.find(func(ev rest.EventJSON) bool { return ev.Kind == "client" }); len(evs) != 0 {
		t.Fatalf("client events from CLI calls: %+v", evs)
	}
}

// A paused appliance (SIGSTOP) is suspect within seconds; resumed
// (SIGCONT), it beats again and every object it held is served again:
// suspicion drops nothing.
func TestSuspectApplianceRecovers(t *testing.T) {
	c := startDefaultCluster(t)
	a := c.appliance("box-a", "--dram", "64MiB")
	c.appliance("box-b", "--dram", "64MiB")
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := randomBytes(9, 256<<10)
	if err := cl.Put(ctx, "paused/k", v, client.WithOptions(client.PutOptions{Replicas: 1, PreferredSegment: "box-a/mem0"})); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	eventually(t, 3*time.Second, "paused box-a suspect", func() bool {
		r, _ := c.ready(t)
		ok, err := cl.Exist(ctx, "paused/k")
		return r.Degraded && err == nil && !ok
	})
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "resumed box-a healthy again", func() bool {
		r, _ := c.ready(t)
		return r.Ready && !r.Degraded && c.applianceUp(t, "box-a") == 1
	})
	got, err := cl.Get(ctx, "paused/k")
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("object after the appliance came back: %v", err)
	}
}
