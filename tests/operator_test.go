package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// standalone starts `kvtier standalone` on free ports with a small DRAM tier
// and an SSD tier in a temporary directory.
func standalone(t *testing.T, extra ...string) *proc {
	t.Helper()
	args := append([]string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--name", "op-box",
		"--dram", "32MiB", "--hugepages", "off", "--ssd-dir", t.TempDir(), "--ssd-capacity", "256MiB"}, extra...)
	return start(t, "standalone", args...)
}

func kv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(kvtierBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("kvtier %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

func wantExit(t *testing.T, what string, code, want int, stderr string) {
	t.Helper()
	if code != want {
		t.Errorf("%s: exit %d, want %d (stderr: %s)", what, code, want, strings.TrimSpace(stderr))
	}
}

// TestExitCodes drives each documented exit code through the binary.
func TestExitCodes(t *testing.T) {
	p := standalone(t, "--lease-ttl", "30s", "--http-token", "T0KEN", "--offload", "off")
	g, h := "--master="+p.addrs["grpc"], "--http="+p.addrs["http"]
	dir := t.TempDir()
	val := filepath.Join(dir, "v")
	if err := os.WriteFile(val, []byte("hello operators"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, e, c := kv(t, nil, "put", "k", val, g)
	wantExit(t, "put", c, 0, e)

	// get --json: metadata on stdout, the data in the file.
	out := filepath.Join(dir, "out")
	o, e, c := kv(t, nil, "get", "k", "-o", out, "--json", g)
	wantExit(t, "get --json -o", c, 0, e)
	var meta struct {
		Key    string         `json:"key"`
		Size   int            `json:"size"`
		File   string         `json:"file"`
		Object map[string]any `json:"object"`
	}
	if err := json.Unmarshal([]byte(o), &meta); err != nil || meta.Size != 15 || meta.File != out || meta.Object["key"] != "k" {
		t.Errorf("get --json printed %q (%v)", o, err)
	}
	if b, _ := os.ReadFile(out); string(b) != "hello operators" {
		t.Errorf("get -o wrote %q", b)
	}
	_, e, c = kv(t, nil, "get", "k", "--json", g)
	wantExit(t, "get --json without -o", c, 2, e)

	// The get took a 30 s lease: rm is refused by policy.
	_, e, c = kv(t, nil, "rm", "k", g)
	wantExit(t, "rm of a leased object", c, 4, e)
	if !strings.Contains(e, "OBJECT_HAS_LEASE") {
		t.Errorf("rm refusal: %s", e)
	}
	o, e, c = kv(t, nil, "rm", "k", "--force", "--json", g)
	wantExit(t, "rm --force --json", c, 0, e)
	var rm struct {
		Key     string `json:"key"`
		Removed bool   `json:"removed"`
	}
	if err := json.Unmarshal([]byte(o), &rm); err != nil || !rm.Removed || rm.Key != "k" {
		t.Errorf("rm --json printed %q", o)
	}

	_, e, c = kv(t, nil, "get", "k", g)
	wantExit(t, "get of an absent key", c, 1, e)
	_, e, c = kv(t, nil, "exist", "k", g)
	wantExit(t, "exist of an absent key", c, 1, e)
	_, e, c = kv(t, nil, "stat", "k", g)
	wantExit(t, "stat of an absent key", c, 1, e)

	_, e, c = kv(t, nil, "get", "--no-such-flag", "k", g)
	wantExit(t, "unknown flag", c, 2, e)
	_, e, c = kv(t, nil, "get", g)
	wantExit(t, "missing argument", c, 2, e)
	_, e, c = kv(t, nil, "frobnicate")
	wantExit(t, "unknown command", c, 2, e)
	_, e, c = kv(t, nil, "standalone", "--dram", "0")
	wantExit(t, "--dram 0", c, 2, e)
	if !strings.Contains(e, "--dram 0") {
		t.Errorf("--dram 0: %s", e)
	}
	_, e, c = kv(t, nil, "put", "k2", filepath.Join(dir, "missing"), g)
	wantExit(t, "put of a missing file", c, 2, e)

	// No space: an object larger than the whole DRAM tier.
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, e, c = kv(t, nil, "put", "big", big, g)
	wantExit(t, "put larger than DRAM", c, 5, e)

	// Unavailable: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	_, e, c = kv(t, nil, "get", "k", "--master", dead, "--timeout", "3s")
	wantExit(t, "get with the master unreachable", c, 3, e)
	_, e, c = kv(t, nil, "status", "--http", dead, "--timeout", "3s")
	wantExit(t, "status with the master unreachable", c, 3, e)

	// Unauthenticated: an admin verb without the token.
	_, e, c = kv(t, nil, "tiers", "set", "--high-watermark", "0.8", h)
	wantExit(t, "tiers set without the token", c, 6, e)
	_, e, c = kv(t, []string{"KVTIER_TOKEN=wrong"}, "tiers", "set", "--high-watermark", "0.8", h)
	wantExit(t, "tiers set with a wrong token", c, 6, e)
	_, e, c = kv(t, []string{"KVTIER_TOKEN=T0KEN"}, "tiers", "set", "--high-watermark", "0.8", h)
	wantExit(t, "tiers set with KVTIER_TOKEN", c, 0, e)
	_, e, c = kv(t, nil, "tiers", "set", h)
	wantExit(t, "tiers set with nothing to set", c, 2, e)
	_, e, c = kv(t, []string{"KVTIER_TOKEN=T0KEN"}, "tiers", "set", "--ssd-policy", "random", h)
	wantExit(t, "tiers set with a bad policy", c, 2, e)
	_, e, c = kv(t, []string{"KVTIER_TOKEN=T0KEN"}, "appliance", "drain", "no-such-box", h)
	wantExit(t, "drain of an unknown appliance", c, 1, e)

	// Host check failed: --hugepages on where none are reserved.
	root := hostTree(t, "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n")
	_, e, c = kv(t, nil, "doctor", "--root", root, "--hugepages", "on")
	wantExit(t, "doctor with a failed check", c, 8, e)
}

// hostTree is a /proc + /sys tree for `kvtier doctor --root`.
func hostTree(t *testing.T, meminfo string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte(meminfo), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

type doctorJSON struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Name, Status, Found, Fix string
	} `json:"checks"`
}

func (d doctorJSON) check(name string) (string, string, string) {
	for _, c := range d.Checks {
		if c.Name == name {
			return c.Status, c.Found, c.Fix
		}
	}
	return "", "", ""
}

// TestDoctorCLI checks a prepared host: hugepages on and off through --root,
// and a low memlock limit set on the real process with prlimit.
func TestDoctorCLI(t *testing.T) {
	on := hostTree(t, "HugePages_Total:     512\nHugePages_Free:      512\nHugepagesize:       2048 kB\n")
	off := hostTree(t, "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n")
	var d doctorJSON
	o, e, c := kv(t, nil, "doctor", "--json", "--root", on, "--dram", "512MiB", "--hugepages", "on")
	if err := json.Unmarshal([]byte(o), &d); err != nil {
		t.Fatalf("doctor --json: %v: %s %s", err, o, e)
	}
	if st, _, _ := d.check("hugepages"); st != "ok" {
		t.Errorf("512 free pages for 512 MiB: %s (%s)", st, o)
	}
	o, _, c = kv(t, nil, "doctor", "--json", "--root", off, "--dram", "512MiB", "--hugepages", "on")
	d = doctorJSON{}
	_ = json.Unmarshal([]byte(o), &d)
	if st, _, fix := d.check("hugepages"); st != "fail" || !strings.Contains(fix, "nr_hugepages=256") || c != 8 || d.OK {
		t.Errorf("no hugepages, on: %s %q exit %d", st, fix, c)
	}
	// Text output names the fix.
	o, _, _ = kv(t, nil, "doctor", "--root", off, "--dram", "512MiB", "--hugepages", "on")
	if !strings.Contains(o, "[FAIL] hugepages") || !strings.Contains(o, "fix:  sysctl -w vm.nr_hugepages=256") {
		t.Errorf("text output:\n%s", o)
	}

	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("skipped: prlimit (util-linux) is not installed: the memlock case needs it")
	}
	cmd := exec.Command(prlimit, "--memlock=65536:65536", "--nofile=1024:1024", kvtierBin, "doctor", "--json", "--root", on, "--dram", "512MiB")
	b, _ := cmd.Output()
	d = doctorJSON{}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("doctor under prlimit: %v: %s", err, b)
	}
	st, found, fix := d.check("memlock")
	if st == "ok" || !strings.HasPrefix(found, "65536") || !strings.Contains(fix, "LimitMEMLOCK=infinity") {
		t.Errorf("memlock 64 KiB: %s %q %q", st, found, fix)
	}
	if st, found, _ := d.check("open_files"); st != "warn" || found != "1024" {
		t.Errorf("nofile 1024: %s %q", st, found)
	}
}

// TestAdminVerbs: status, tiers show|set, appliance drain|undrain against a
// running master through REST, with the admin token from --token-file.
func TestAdminVerbs(t *testing.T) {
	p := standalone(t, "--http-token", "s3cret")
	h := "--http=" + p.addrs["http"]
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, e, c := kv(t, nil, "status", h)
	wantExit(t, "status", c, 0, e)
	for _, want := range []string{"# master", "# tiers", "op-box", "op-box/mem0", "version:"} {
		if !strings.Contains(o, want) {
			t.Errorf("status lacks %q:\n%s", want, o)
		}
	}
	// The first look at a master nobody asked lately has rates too (status
	// looks twice): no "last 0 s" window.
	if !regexp.MustCompile(`# rates \(last [1-9][0-9]* s\)\nputs/s `).MatchString(o) {
		t.Errorf("status has no measured rates:\n%s", o)
	}
	o, e, c = kv(t, []string{"KVTIER_HTTP=" + p.addrs["http"]}, "status", "--json")
	wantExit(t, "status --json (KVTIER_HTTP)", c, 0, e)
	var st struct {
		Version map[string]any `json:"version"`
		Clients struct {
			Clients []struct{ ID string } `json:"clients"`
		} `json:"clients"`
	}
	if err := json.Unmarshal([]byte(o), &st); err != nil || st.Version["go_version"] == nil || len(st.Clients.Clients) == 0 {
		t.Errorf("status --json: %v %s", err, o)
	}

	// The running server's effective configuration: every flag, its source,
	// the token masked.
	var cfg struct {
		Settings map[string]string `json:"settings"`
		Sources  map[string]string `json:"sources"`
	}
	if err := json.Unmarshal([]byte(httpBody(t, "http://"+p.addrs["http"]+"/api/v1/config")), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Settings["http-token"] != "********" || cfg.Sources["http-token"] != "flag" || cfg.Settings["dram"] != "32MiB" ||
		cfg.Sources["lease-ttl"] != "default" || strings.Contains(fmt.Sprint(cfg), "s3cret") {
		t.Errorf("GET /api/v1/config: %+v", cfg)
	}
	o, e, c = kv(t, nil, "tiers", "set", "--ssd-policy", "lru", "--eviction-ratio", "0.1", "--token-file", tok, "--json", h)
	wantExit(t, "tiers set", c, 0, e)
	if !strings.Contains(o, `"policy": "lru"`) || !strings.Contains(o, `"eviction_ratio": 0.1`) {
		t.Errorf("tiers set --json: %s", o)
	}
	o, e, c = kv(t, nil, "tiers", "show", h)
	wantExit(t, "tiers show", c, 0, e)
	if !strings.Contains(o, "policy=lru") || !strings.Contains(o, "eviction_ratio=0.10") {
		t.Errorf("tiers show: %s", o)
	}

	o, e, c = kv(t, nil, "appliance", "drain", "op-box", "--grace", "10m", "--token-file", tok, h)
	wantExit(t, "appliance drain", c, 0, e)
	if !strings.Contains(o, "draining op-box: 1 segments (op-box/mem0)") {
		t.Errorf("drain: %s", o)
	}
	segState := func() string {
		res, err := http.Get("http://" + p.addrs["http"] + "/api/v1/segments")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var s struct {
			Segments []struct{ Name, State string } `json:"segments"`
		}
		_ = json.NewDecoder(res.Body).Decode(&s)
		for _, x := range s.Segments {
			if x.Name == "op-box/mem0" {
				return x.State
			}
		}
		return "absent"
	}
	if s := segState(); s != "draining" {
		t.Errorf("after drain the segment is %s", s)
	}
	val := filepath.Join(t.TempDir(), "v")
	_ = os.WriteFile(val, []byte("x"), 0o644)
	_, e, c = kv(t, nil, "put", "during-drain", val, "--master", p.addrs["grpc"])
	wantExit(t, "put while the only segment drains", c, 5, e)
	o, e, c = kv(t, nil, "appliance", "undrain", "op-box", "--json", "--token-file", tok, h)
	wantExit(t, "appliance undrain", c, 0, e)
	if !strings.Contains(o, `"undrained"`) {
		t.Errorf("undrain: %s", o)
	}
	if s := segState(); s != "mounted" {
		t.Errorf("after undrain the segment is %s", s)
	}
	_, e, c = kv(t, nil, "put", "after-undrain", val, "--master", p.addrs["grpc"])
	wantExit(t, "put after undrain", c, 0, e)

	// A drain that ran its course unmounts the segment and heartbeats leave
	// it unmounted; undrain lets the next heartbeat mount it again.
	_, e, c = kv(t, nil, "appliance", "drain", "op-box", "--grace", "50ms", "--token-file", tok, h)
	wantExit(t, "short drain", c, 0, e)
	eventually(t, 10*time.Second, "the drained segment unmounted", func() bool { return segState() == "absent" })
	time.Sleep(1500 * time.Millisecond) // a heartbeat or more
	if s := segState(); s != "absent" {
		t.Fatalf("a heartbeat remounted a drained segment: %s", s)
	}
	o, e, c = kv(t, nil, "appliance", "undrain", "op-box", "--token-file", tok, h)
	wantExit(t, "undrain after unmount", c, 0, e)
	if !strings.Contains(o, "op-box/mem0") {
		t.Errorf("undrain after unmount: %s", o)
	}
	eventually(t, 15*time.Second, "the segment remounted by a heartbeat", func() bool { return segState() == "mounted" })
}

// TestHTTPSurfaceOfTheBinary: unknown paths are 404, HEAD works, version and
// the build-info, Go and process metrics are served.
func TestHTTPSurfaceOfTheBinary(t *testing.T) {
	p := standalone(t)
	base := "http://" + p.addrs["http"]
	for _, path := range []string{"/healthz", "/version", "/debug/pprof", "/get_all_segments"} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Errorf("GET %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	res, err := http.Head(base + "/api/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("HEAD /api/v1/health: %d", res.StatusCode)
	}
	body := httpBody(t, base+"/metrics")
	for _, want := range []string{`kvtier_build_info{commit=`, "go_goroutines ", "process_resident_memory_bytes ", `kvtier_clients{state="live"}`,
		`kvtier_ssd_capacity_bytes{appliance="op-box"} 2.68435456e+08`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `kvtier_clients{result=`) {
		t.Error("kvtier_clients still labels the state 'result'")
	}
	o, _, _ := kv(t, nil, "--version")
	if !regexp.MustCompile(`^kvtier \S+ \(commit \S+, go1\.\d+`).MatchString(o) {
		t.Errorf("--version: %q", o)
	}
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadinessLogsAndSummary: under systemd (NOTIFY_SOCKET) the server sends
// READY=1 once listening; --log-format json writes one JSON object per line,
// with the periodic summary among them; SIGTERM drains and exits 0.
func TestReadinessLogsAndSummary(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	p := standalone(t, "--log-format", "json", "--log-level", "debug", "--summary-interval", "200ms", "--drain-grace", "100ms")
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "READY=1") {
		t.Fatalf("no READY=1 on NOTIFY_SOCKET: %q %v", buf[:n], err)
	}
	eventually(t, 10*time.Second, "a summary line", func() bool { return strings.Contains(p.output(), `"msg":"summary"`) })
	p.stop(t)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "STOPPING=1") {
		t.Errorf("no STOPPING=1: %q %v", buf[:n], err)
	}
	for _, line := range strings.Split(strings.TrimSpace(p.output()), "\n") {
		if strings.HasPrefix(line, "listening ") || strings.HasPrefix(line, "web UI:") {
			continue // stdout: the address line scripts read
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["level"] == nil || m["msg"] == nil {
			t.Errorf("not a JSON log line: %q", line)
		}
	}
	_, e, c := kv(t, nil, "standalone", "--log-format", "xml")
	wantExit(t, "--log-format xml", c, 2, e)
}

// TestTierConflictReportedAtStart: the master's SSD policy is fifo; an
// appliance started with --ssd-policy lru says so at start (it used to log
// policy=fifo and nothing else).
func TestTierConflictReportedAtStart(t *testing.T) {
	c := startCluster(t)
	a := c.appliance("conflicted", "--ssd-policy", "lru", "--ssd-dir", t.TempDir())
	eventually(t, 10*time.Second, "the conflict reported", func() bool {
		return strings.Contains(a.output(), "tier setting conflict: --ssd-policy lru, cluster uses fifo")
	})
	// Agreeing flags report nothing.
	b := c.appliance("agreeing", "--ssd-policy", "fifo", "--ssd-dir", t.TempDir(), "--summary-interval", "200ms")
	// An appliance logs its own one-line summary.
	eventually(t, 10*time.Second, "the appliance's summary line", func() bool {
		return strings.Contains(b.output(), "msg=summary") && strings.Contains(b.output(), "ssd_capacity=")
	})
	if strings.Contains(b.output(), "conflict") {
		t.Errorf("a conflict reported for agreeing flags:\n%s", b.output())
	}
	// A standalone is its own cluster: its --ssd-policy is the cluster's.
	p := standalone(t, "--ssd-policy", "lru")
	if o, e, code := kv(t, nil, "tiers", "show", "--http", p.addrs["http"]); code != 0 || !strings.Contains(o, "policy=lru") {
		t.Errorf("standalone --ssd-policy lru: tiers show %q %s", o, e)
	}
	eventually(t, 5*time.Second, "no policy=fifo in the standalone's log", func() bool {
		return strings.Contains(p.output(), "policy=lru") && !strings.Contains(p.output(), "policy=fifo")
	})
}

// TestSystemdUnitVerifies runs systemd-analyze verify on deploy/systemd/
// kvtier.service as it is, with the built binary at its ExecStart path in a
// private mount namespace (nothing on the host changes).
func TestSystemdUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipped: systemd-analyze not installed (Debian's systemd package; .ci/run installs it)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipped: unshare (util-linux) missing: cannot place the binary at /usr/local/bin/kvtier privately")
	}
	unit, _ := filepath.Abs("../deploy/systemd/kvtier.service")
	script := "mount -t tmpfs tmpfs /usr/local/bin && cp " + kvtierBin + " /usr/local/bin/kvtier && cd / && " + sa + " verify " + unit
	out, err := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil && (strings.Contains(string(out), "Operation not permitted") || strings.Contains(string(out), "unshare failed")) {
		t.Skipf("skipped: no private mount namespace in this container (%s)", strings.TrimSpace(string(out)))
	}
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	raw, _ := os.ReadFile(unit)
	for _, want := range []string{"Type=notify", "LimitMEMLOCK=infinity", "LimitNOFILE=", "Restart=on-failure", "ExecStartPre=+/sbin/sysctl -w vm.nr_hugepages=", "TimeoutStopSec="} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
}

// TestMakeDistFromCleanClone: make dist in a fresh clone of the committed
// tree, then the tarball's binary runs `kvtier version`.
func TestMakeDistFromCleanClone(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: builds the binary again")
	}
	for _, tool := range []string{"git", "make", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: %s not installed", tool)
		}
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("skipped: not a git checkout: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "kvtier")
	if out, err := exec.Command("git", "clone", "-q", strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	mk := exec.Command("make", "dist", "VERSION=v0.0.0-test")
	mk.Dir = clone
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	tgz, _ := filepath.Glob(filepath.Join(clone, "dist", "kvtier-v0.0.0-test-*.tar.gz"))
	if len(tgz) != 1 {
		t.Fatalf("tarballs: %v", tgz)
	}
	ex := t.TempDir()
	if out, err := exec.Command("tar", "-C", ex, "-xzf", tgz[0]).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	dirs, _ := filepath.Glob(filepath.Join(ex, "kvtier-v0.0.0-test-*"))
	if len(dirs) != 1 {
		t.Fatalf("extracted: %v", dirs)
	}
	out, err := exec.Command(filepath.Join(dirs[0], "bin", "kvtier"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "kvtier v0.0.0-test (commit ") {
		t.Fatalf("tarball's kvtier version: %v %q", err, out)
	}
	for _, f := range []string{"systemd/kvtier.service", "kvtier.example.yaml", "firmware-notes/hugepages.md", "firmware-notes/README.md"} {
		if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
			t.Errorf("tarball lacks %s", f)
		}
	}
	// The C library and the Python package come along when the tree has them.
	_, gccErr := exec.LookPath("gcc")
	if _, err := os.Stat(filepath.Join(clone, "capi")); err == nil && gccErr == nil {
		if _, err := os.Stat(filepath.Join(dirs[0], "lib", "libkvtier.so")); err != nil {
			t.Errorf("the tree has capi/ but the tarball has no lib/libkvtier.so")
		}
		if _, err := os.Stat(filepath.Join(dirs[0], "include", "kvtier_store.h")); err != nil {
			t.Errorf("the tarball has no include/kvtier_store.h")
		}
	}
	if _, err := os.Stat(filepath.Join(clone, "python")); err == nil {
		if _, err := os.Stat(filepath.Join(dirs[0], "python", "kvtier", "__init__.py")); err != nil {
			t.Errorf("the tree has python/ but the tarball does not")
		}
		if gccErr == nil {
			if _, err := os.Stat(filepath.Join(dirs[0], "python", "kvtier", "libkvtier.so")); err != nil {
				t.Errorf("the tarball's python/kvtier lacks libkvtier.so")
			}
		}
	}
}

// counters parses every sample of every counter family of a scrape.
func counters(scrape string) map[string]float64 {
	types := map[string]string{}
	out := map[string]float64{}
	for _, line := range strings.Split(scrape, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		series := line[:sp]
		name := series
		if i := strings.IndexByte(series, '{'); i >= 0 {
			name = series[:i]
		}
		if types[name] != "counter" {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err == nil {
			out[series] = v
		}
	}
	return out
}

// TestMetricsAcrossApplianceRestart: an appliance with an SSD tier is killed
// and restarted under a running master; every counter of the scrape after is
// at least its value before, the SSD counters are labelled per appliance,
// and promtool accepts both scrapes.
func TestMetricsAcrossApplianceRestart(t *testing.T) {
	c := startCluster(t)
	ssdDir := t.TempDir()
	args := []string{"--ssd-dir", ssdDir, "--ssd-capacity", "256MiB", "--dram", "64MiB", "--data-addr", freePort(t)}
	a := c.appliance("restarting", args...)
	val := filepath.Join(t.TempDir(), "v")
	_ = os.WriteFile(val, bytes.Repeat([]byte("x"), 1<<20), 0o644)
	for i := range 8 {
		if _, e, code := c.cli(t, nil, "put", "obj"+strconv.Itoa(i), val); code != 0 {
			t.Fatalf("put: %s", e)
		}
	}
	url := "http://" + c.http + "/metrics"
	written := regexp.MustCompile(`kvtier_ssd_written_bytes_total\{appliance="restarting"\} (\S+)`)
	var before string
	eventually(t, 20*time.Second, "8 MiB offloaded to SSD", func() bool {
		before = httpBody(t, url)
		m := written.FindStringSubmatch(before)
		v, _ := strconv.ParseFloat(safeIdx(m, 1), 64)
		return v >= 8<<20
	})
	a.kill()
	a = c.appliance("restarting", args...)
	// After the restart the appliance reports its own counters from zero;
	// write a little so they are not zero.
	for i := range 2 {
		if _, e, code := c.cli(t, nil, "put", "after"+strconv.Itoa(i), val); code != 0 {
			t.Fatalf("put after restart: %s", e)
		}
	}
	var after string
	eventually(t, 20*time.Second, "the offloads after the restart counted on top", func() bool {
		after = httpBody(t, url)
		m := written.FindStringSubmatch(after)
		v, _ := strconv.ParseFloat(safeIdx(m, 1), 64)
		return v >= 10<<20
	})
	cb, ca := counters(before), counters(after)
	if len(cb) < 20 {
		t.Fatalf("only %d counter series before", len(cb))
	}
	var names []string
	for s := range cb {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		v, ok := ca[s]
		if !ok {
			// A series may vanish only with what it labels (no appliance did).
			t.Errorf("counter %s disappeared after the restart", s)
			continue
		}
		if v < cb[s] {
			t.Errorf("counter %s went backwards: %v -> %v", s, cb[s], v)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped: promtool not installed (Debian's prometheus package; .ci/run installs it); counters were compared")
	}
	for name, body := range map[string]string{"before": before, "after": after} {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics (%s the restart): %v\n%s", name, err, out)
		}
	}
}

func safeIdx(m []string, i int) string {
	if len(m) > i {
		return m[i]
	}
	return ""
}
