package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The Redis protocol front end (package resp) driven by real Redis tools
// against a real `kvtier standalone --resp-addr` process.

// startRESP runs a standalone with the Redis front end on a free port and
// returns the process and the front end's address.
func startRESP(t *testing.T, extra ...string) (*proc, string) {
	t.Helper()
	args := append([]string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--resp-addr", "127.0.0.1:0", "--ssd-dir", "", "--dram", "256MiB"}, extra...)
	if respEventLoop {
		args = append(args, "--resp-event-loop")
	}
	p := start(t, "standalone", args...)
	addr := p.addrs["resp"]
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("no resp= address in the listening line:\n%s", p.output())
	}
	return p, addr
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (apt-get install redis-tools python3-redis; .ci/run does): %v", name, err)
	}
}

// redisCLI runs redis-cli against addr and returns its stdout.
func redisCLI(t *testing.T, addr string, stdin []byte, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
	}
	return strings.TrimRight(string(out), "\n")
}

// respConn is a minimal RESP client for the tests that need raw bytes.
type respConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialRESP(t testing.TB, addr string) *respConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return &respConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *respConn) send(args ...string) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.nc.Write(b.Bytes()); err != nil {
		c.t.Fatal(err)
	}
}

// do sends a command and returns its reply rendered as text: "+OK",
// "-ERR ...", ":3", a bulk string's bytes, "(nil)", arrays and maps as
// "[a b]".
func (c *respConn) do(args ...string) string {
	c.send(args...)
	return c.read()
}

func (c *respConn) read() string {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	line, err := c.br.ReadString('\n')
	if err != nil {
		c.t.Fatalf("reading reply: %v", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch line[0] {
	case '+', '-', ':':
		return line
	case '_':
		return "(nil)"
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "(nil)"
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, b); err != nil {
			c.t.Fatal(err)
		}
		return string(b[:n])
	case '*', '%':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "(nil)"
		}
		if line[0] == '%' {
			n *= 2
		}
		var parts []string
		for range n {
			parts = append(parts, c.read())
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	c.t.Fatalf("unexpected reply line %q", line)
	return ""
}

func (c *respConn) Close() { c.nc.Close() }

func TestRESPRedisCLI(t *testing.T) {
	needTool(t, "redis-cli")
	_, addr := startRESP(t)
	cli := func(args ...string) string { return redisCLI(t, addr, nil, args...) }
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k1", "hello"}, "OK"},
		{[]string{"GET", "k1"}, "hello"},
		{[]string{"SET", "k1", "world!"}, "OK"}, // an existing key is replaced, as in Redis
		{[]string{"GET", "k1"}, "world!"},
		{[]string{"STRLEN", "k1"}, "6"},
		{[]string{"TYPE", "k1"}, "string"},
		{[]string{"TYPE", "nope"}, "none"},
		{[]string{"EXISTS", "k1", "nope", "k1"}, "2"},
		{[]string{"SET", "k1", "x", "NX"}, ""}, // nil: not set
		{[]string{"SET", "k2", "x", "XX"}, ""},
		{[]string{"SET", "k2", "two", "NX"}, "OK"},
		{[]string{"MSET", "m1", "a", "m2", "b"}, "OK"},
		{[]string{"MGET", "m1", "nope", "m2"}, "a\n\nb"},
		{[]string{"TTL", "k1"}, "-1"},
		{[]string{"TTL", "nope"}, "-2"},
		{[]string{"SET", "ex", "v", "EX", "100"}, "OK"},
		{[]string{"TTL", "ex"}, "100"},
		{[]string{"EXPIRE", "k1", "50"}, "1"},
		{[]string{"TTL", "k1"}, "50"},
		{[]string{"GET", "k1"}, "world!"}, // EXPIRE kept the value
		{[]string{"EXPIRE", "nope", "50"}, "0"},
		{[]string{"PERSIST", "k1"}, "1"},
		{[]string{"ECHO", "hi there"}, "hi there"},
		{[]string{"SELECT", "0"}, "OK"},
		{[]string{"SELECT", "1"}, "ERR DB index is out of range"},
		{[]string{"CLIENT", "SETNAME", "tester"}, "OK"},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "redis-cli"}, "OK"},
		{[]string{"DEL", "k1", "nope", "k2"}, "2"},
		{[]string{"UNLINK", "m1"}, "1"},
		{[]string{"GET", "k1"}, ""},
		{[]string{"AUTH", "pw"}, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{[]string{"CONFIG", "GET", "maxmemory"}, "maxmemory\n268435456"},
		{[]string{"CONFIG", "GET", "maxmemory-p*"}, "maxmemory-policy\nallkeys-lru"},
		{[]string{"NOSUCH", "a"}, "ERR unknown command 'NOSUCH', with args beginning with: 'a' "},
		{[]string{"GET"}, "ERR wrong number of arguments for 'get' command"},
		{[]string{"SET", "ex", "changed", "EX", "-5"}, "ERR invalid expire time in 'set' command"},
		{[]string{"SET", "ex", "changed", "BOGUS"}, "ERR syntax error"},
		{[]string{"GET", "ex"}, "v"}, // bad input changed nothing
		{[]string{"SET", "empty", ""}, `ERR INVALID_PARAMS key="empty": empty value: an object holds at least one byte`},
		{[]string{"MSET", "m3", "a", "m4", ""}, `ERR INVALID_PARAMS key="m4": empty value: an object holds at least one byte`},
		{[]string{"EXISTS", "m3"}, "0"}, // MSET refused whole: nothing stored
		{[]string{"DBSIZE"}, "2"},       // ex and m2 (k1, k2, m1 deleted, empty refused)
	}
	for _, s := range steps {
		if got := cli(s.args...); got != s.want {
			t.Errorf("%q: got %q, want %q", s.args, got, s.want)
		}
	}
	// Binary values through -x (stdin as the last argument), with CR/LF and NULs.
	val := []byte("a\r\nb\x00c\xff")
	if got := redisCLI(t, addr, val, "-x", "SET", "bin"); got != "OK" {
		t.Fatalf("SET -x: %q", got)
	}
	if got := redisCLI(t, addr, nil, "--no-raw", "GET", "bin"); got != `"a\r\nb\x00c\xff"` {
		t.Fatalf("GET bin: %q", got)
	}
	info := cli("INFO")
	for _, want := range []string{"# Server", "redis_version:", "# Clients", "connected_clients:", "# Memory", "maxmemory:268435456",
		"# Stats", "keyspace_hits:", "keyspace_misses:", "evicted_keys:", "# Keyspace", "db0:keys=3"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q:\n%s", want, info)
		}
	}
	if got := cli("INFO", "stats"); strings.Contains(got, "# Server") || !strings.Contains(got, "# Stats") {
		t.Errorf("INFO stats:\n%s", got)
	}
}

// TestRESPPipeAndScan loads keys with redis-cli --pipe (the bulk-load
// path) and reads them back with SCAN iteration (redis-cli --scan).
func TestRESPPipeAndScan(t *testing.T) {
	needTool(t, "redis-cli")
	_, addr := startRESP(t)
	const n = 2000
	var proto bytes.Buffer
	for i := range n {
		k, v := fmt.Sprintf("pipe:%05d", i), fmt.Sprintf("value-%d", i)
		fmt.Fprintf(&proto, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
	}
	for i := range 10 { // and a few under another prefix
		fmt.Fprintf(&proto, "SET other:%d x\r\n", i) // inline commands in the same stream
	}
	out := redisCLI(t, addr, proto.Bytes(), "--pipe")
	if !strings.Contains(out, fmt.Sprintf("errors: 0, replies: %d", n+10)) {
		t.Fatalf("--pipe: %s", out)
	}
	if got := redisCLI(t, addr, nil, "DBSIZE"); got != strconv.Itoa(n+10) {
		t.Fatalf("DBSIZE %s", got)
	}
	if got := redisCLI(t, addr, nil, "GET", "pipe:01234"); got != "value-1234" {
		t.Fatalf("GET %q", got)
	}
	keys := strings.Fields(redisCLI(t, addr, nil, "--scan", "--pattern", "pipe:01*"))
	if len(keys) != 1000 {
		t.Fatalf("--scan pipe:01*: %d keys", len(keys))
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, "pipe:01") || seen[k] {
			t.Fatalf("--scan returned %q (dup %v)", k, seen[k])
		}
		seen[k] = true
	}
	all := strings.Fields(redisCLI(t, addr, nil, "--scan"))
	if len(all) != n+10 {
		t.Fatalf("--scan: %d keys, want %d", len(all), n+10)
	}
	if got := strings.Fields(redisCLI(t, addr, nil, "--scan", "--pattern", "*:[3-4]")); len(got) != 2 {
		t.Fatalf("--scan *:[3-4]: %q", got)
	}
	// A cursor the server never issued is refused.
	if got := redisCLI(t, addr, nil, "SCAN", "987654321"); got != "ERR invalid cursor" {
		t.Fatalf("SCAN bogus cursor: %q", got)
	}
}

func TestRESPPythonRedis(t *testing.T) {
	// Debian's python3-redis lives in /usr/bin/python3's path; a python3
	// earlier in PATH (pyenv, a venv) may not see it.
	py := ""
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(cand, "-c", "import redis").Run() == nil {
			py = cand
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with the redis package (apt-get install python3-redis; .ci/run does)")
	}
	_, addr := startRESP(t)
	host, port, _ := net.SplitHostPort(addr)
	script := `
import sys, redis
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
assert r.ping()
blob = bytes(range(256)) * 4096          # 1 MiB, every byte value
assert r.set("py:blob", blob)
assert r.get("py:blob") == blob
assert r.strlen("py:blob") == len(blob)
assert r.exists("py:blob", "py:none") == 1
assert r.get("py:none") is None
assert r.set("py:nx", "1", nx=True) and r.set("py:nx", "2", nx=True) is None
assert r.get("py:nx") == b"1"
assert r.set("py:nx", "3", xx=True) and r.get("py:nx") == b"3"
assert r.set("py:ttl", "v", px=20000) and 0 < r.pttl("py:ttl") <= 20000
assert r.expire("py:nx", 30) and 0 < r.ttl("py:nx") <= 30
# pipelining: 200 SETs then 200 GETs in one round trip each
p = r.pipeline(transaction=False)
for i in range(200):
    p.set(f"py:p:{i}", f"v{i}")
assert all(p.execute())
p = r.pipeline(transaction=False)
for i in range(200):
    p.get(f"py:p:{i}")
assert p.execute() == [f"v{i}".encode() for i in range(200)]
assert r.mset({"py:m1": "a", "py:m2": "b"}) and r.mget("py:m1", "py:x", "py:m2") == [b"a", None, b"b"]
keys = set(r.scan_iter(match="py:p:1*", count=25))
assert keys == {f"py:p:{i}".encode() for i in range(200) if str(i).startswith("1")}, keys
assert r.client_setname("lmcache") and r.client_getname() in (b"lmcache", "lmcache")
assert r.client_id() > 0
info = r.info()
assert info["redis_version"] and "keyspace_hits" in info and info["connected_clients"] >= 1
assert "maxmemory" in r.config_get("maxmemory*")
assert r.dbsize() >= 205
assert r.delete("py:m1", "py:m2", "py:none") == 2
assert r.type("py:blob") in (b"string", "string")
try:
    r.execute_command("NOSUCHCMD")
    raise SystemExit("unknown command accepted")
except redis.ResponseError as e:
    assert "unknown command" in str(e), e
r.close()
print("ok")
`
	out, err := exec.Command(py, "-c", script, host, port).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python redis: %v\n%s", err, out)
	}
}

// TestRESPProtocolAndBadInput covers RESP3 (HELLO 3), inline commands,
// pipelined replies in order, and bad input: a protocol error closes the
// connection and changes nothing.
func TestRESPProtocolAndBadInput(t *testing.T) {
	_, addr := startRESP(t)
	c := dialRESP(t, addr)
	defer c.Close()
	if got := c.do("HELLO", "3", "SETNAME", "r3"); !strings.Contains(got, "proto :3") || !strings.HasPrefix(got, "[server redis version") {
		t.Fatalf("HELLO 3: %q", got)
	}
	if got := c.do("GET", "missing"); got != "(nil)" { // RESP3 null "_"
		t.Fatalf("GET missing in RESP3: %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != "r3" {
		t.Fatalf("CLIENT GETNAME %q", got)
	}
	if got := c.do("HELLO", "4"); got != "-NOPROTO unsupported protocol version" {
		t.Fatalf("HELLO 4: %q", got)
	}
	if got := c.do("HELLO", "2"); !strings.Contains(got, "proto :2") {
		t.Fatalf("HELLO 2: %q", got)
	}
	// Pipelining: many requests in one write, replies in order.
	var b bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&b, "*3\r\n$3\r\nSET\r\n$4\r\np%03d\r\n$4\r\nv%03d\r\n", i, i)
		fmt.Fprintf(&b, "*2\r\n$3\r\nGET\r\n$4\r\np%03d\r\n", i)
	}
	if _, err := c.nc.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if got := c.read(); got != "+OK" {
			t.Fatalf("pipelined SET %d: %q", i, got)
		}
		if got := c.read(); got != fmt.Sprintf("v%03d", i) {
			t.Fatalf("pipelined GET %d: %q", i, got)
		}
	}
	// Inline command.
	if _, err := c.nc.Write([]byte("EXISTS p001 p002 nope\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := c.read(); got != ":2" {
		t.Fatalf("inline EXISTS: %q", got)
	}
	// A framing error: answered, then the connection is closed; the SET
	// it was part of never ran.
	if _, err := c.nc.Write([]byte("*3\r\n$3\r\nSET\r\n$4\r\np001\r\n$x\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := c.read(); got != "-ERR Protocol error: invalid bulk length" {
		t.Fatalf("protocol error reply: %q", got)
	}
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Fatalf("connection left open after a protocol error: %v", err)
	}
	c2 := dialRESP(t, addr)
	defer c2.Close()
	if got := c2.do("GET", "p001"); got != "v001" {
		t.Fatalf("after the protocol error p001 = %q", got)
	}
	if got := c2.do("SCAN", "0", "COUNT", "0"); got != "-ERR syntax error" {
		t.Fatalf("SCAN COUNT 0: %q", got)
	}
	if got := c2.do("QUIT"); got != "+OK" {
		t.Fatalf("QUIT %q", got)
	}
	if _, err := c2.br.ReadByte(); err != io.EOF {
		t.Fatalf("connection open after QUIT: %v", err)
	}
}

// TestRESPNoSpace: a value the DRAM tier cannot hold is refused with the
// NOSPACE error word and the kvtier code, and the key is left as it was.
func TestRESPNoSpace(t *testing.T) {
	_, addr := startRESP(t, "--dram", "8MiB")
	c := dialRESP(t, addr)
	defer c.Close()
	if got := c.do("SET", "big", "before"); got != "+OK" {
		t.Fatal(got)
	}
	got := c.do("SET", "big", strings.Repeat("x", 12<<20))
	if !strings.HasPrefix(got, "-NOSPACE NO_AVAILABLE_HANDLE") {
		t.Fatalf("12 MiB into 8 MiB of DRAM: %q", got)
	}
	// SET of an existing key replaces it: the old value went before the
	// new one was refused, so the key is now missing, not half-written.
	if got := c.do("GET", "big"); got != "(nil)" && got != "before" {
		t.Fatalf("after the refused SET: %q", got)
	}
}

// TestRESPThousandConnections holds 1,000 connections open at once, each
// doing its own SET and GET, then checks INFO's count.
func TestRESPThousandConnections(t *testing.T) {
	_, addr := startRESP(t)
	const n = 1000
	conns := make([]*respConn, n)
	for i := range conns {
		conns[i] = dialRESP(t, addr)
		defer conns[i].Close()
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	var first atomic.Value
	for i, c := range conns {
		wg.Go(func() {
			k, v := fmt.Sprintf("conn:%d", i), strings.Repeat(strconv.Itoa(i), 100)
			if got := c.do("SET", k, v); got != "+OK" {
				bad.Add(1)
				first.CompareAndSwap(nil, "SET "+got)
				return
			}
			if got := c.do("GET", k); got != v {
				bad.Add(1)
				first.CompareAndSwap(nil, "GET "+got)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d connections failed; first: %v", bad.Load(), n, first.Load())
	}
	info := conns[0].do("INFO", "clients")
	if !strings.Contains(info, fmt.Sprintf("connected_clients:%d\r\n", n)) {
		t.Fatalf("INFO clients with %d connections open:\n%s", n, info)
	}
}

// TestRESPExistsImpliesGet: LMCache's Redis backend asks EXISTS and then
// GETs; a key reported present must be readable right after, also while
// writers fill the DRAM tier and eviction runs.
func TestRESPExistsImpliesGet(t *testing.T) {
	_, addr := startRESP(t, "--dram", "32MiB")
	const keys = 400
	val := strings.Repeat("v", 256<<10) // 400 x 256 KiB = 100 MiB through 32 MiB: evictions
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var setErrs atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			c := dialRESP(t, addr)
			defer c.Close()
			for i := w; i < keys; i += 2 {
				if got := c.do("SET", fmt.Sprintf("lm:%d", i), val); got != "+OK" {
					setErrs.Add(1)
				}
			}
		})
	}
	var checked, present atomic.Int64
	var fail atomic.Value
	for range 4 {
		wg.Go(func() {
			c := dialRESP(t, addr)
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("lm:%d", rand.IntN(keys))
				ex := c.do("EXISTS", k)
				checked.Add(1)
				if ex != ":1" {
					continue
				}
				present.Add(1)
				if got := c.do("GET", k); got != val {
					fail.CompareAndSwap(nil, fmt.Sprintf("EXISTS %s = 1 but GET gave %.40q", k, got))
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	deadline := time.Now().Add(60 * time.Second)
	for checked.Load() < 2000 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if f := fail.Load(); f != nil {
		t.Fatal(f)
	}
	c := dialRESP(t, addr)
	defer c.Close()
	info := c.do("INFO", "stats")
	t.Logf("%d EXISTS, %d present then read; SET errors %d; %s", checked.Load(), present.Load(), setErrs.Load(),
		strings.Join(strings.Fields(info), " "))
	if present.Load() == 0 {
		t.Fatal("no key was ever present: the test proved nothing")
	}
	if !strings.Contains(info, "evicted_keys:") || strings.Contains(info, "evicted_keys:0\r") {
		t.Fatalf("no eviction happened; the test did not exercise the race it is about:\n%s", info)
	}
}

// TestRESPAuth: with --resp-password-file every command but AUTH, HELLO
// and QUIT waits for the password.
func TestRESPAuth(t *testing.T) {
	pw := t.TempDir() + "/pw"
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := startRESP(t, "--resp-password-file", pw)
	c := dialRESP(t, addr)
	defer c.Close()
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "a", "1"}, "-NOAUTH Authentication required."},
		{[]string{"AUTH", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"GET", "a"}, "-NOAUTH Authentication required."},
		{[]string{"AUTH", "default", "s3cret"}, "+OK"},
		{[]string{"SET", "a", "1"}, "+OK"},
	} {
		if got := c.do(s.args...); got != s.want {
			t.Fatalf("%q: got %q, want %q", s.args, got, s.want)
		}
	}
	c2 := dialRESP(t, addr)
	defer c2.Close()
	if got := c2.do("HELLO", "3", "AUTH", "default", "s3cret"); !strings.Contains(got, "proto :3") {
		t.Fatalf("HELLO 3 AUTH: %q", got)
	}
	if got := c2.do("GET", "a"); got != "1" {
		t.Fatalf("GET after HELLO AUTH: %q", got)
	}
	if _, err := exec.LookPath("redis-cli"); err == nil {
		if got := redisCLI(t, addr, nil, "--no-auth-warning", "-a", "s3cret", "GET", "a"); got != "1" {
			t.Fatalf("redis-cli -a: %q", got)
		}
	}
}

// TestRESPOnAppliance: `kvtier appliance --resp-addr` joins a cluster and
// stores through the SDK like any client: a value SET over Redis is read
// back by `kvtier get` through the master. SIGTERM with a Redis connection
// open exits cleanly.
func TestRESPOnAppliance(t *testing.T) {
	c := startCluster(t)
	a := c.appliance("box-resp", "--resp-addr", "127.0.0.1:0")
	addr := a.addrs["resp"]
	if addr == "" {
		t.Fatalf("no resp= in the appliance's listening line:\n%s", a.output())
	}
	rc := dialRESP(t, addr)
	defer rc.Close()
	if got := rc.do("SET", "from-redis", "bytes via RESP"); got != "+OK" {
		t.Fatal(got)
	}
	out, errOut, code := c.cli(t, nil, "get", "from-redis")
	if code != 0 || out != "bytes via RESP" {
		t.Fatalf("kvtier get: %q %q exit %d", out, errOut, code)
	}
	if _, _, code := c.cli(t, []byte("from the CLI"), "put", "from-cli", "-"); code != 0 {
		t.Fatal("kvtier put failed")
	}
	if got := rc.do("GET", "from-cli"); got != "from the CLI" {
		t.Fatalf("GET of a key put by the CLI: %q", got)
	}
	if got := rc.do("COMMAND", "COUNT"); got != ":26" {
		t.Fatalf("COMMAND COUNT: %q", got)
	}
	a.stop(t) // SIGTERM with rc still connected: exit 0
}

// TestRESPBadAddress: a --resp-addr that cannot be listened on stops the
// process with an error naming the flag.
func TestRESPBadAddress(t *testing.T) {
	_, errOut, code := runKvtierCode(t, nil, "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--ssd-dir", "", "--dram", "16MiB", "--resp-addr", "127.0.0.1:notaport")
	if code == 0 || !strings.Contains(errOut, "--resp-addr 127.0.0.1:notaport") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}

// respEventLoop makes startRESP serve with --resp-event-loop (set by
// TestRESPEventLoop around the tests it runs again).
var respEventLoop bool

// TestRESPEventLoop runs the RESP tests again against `kvtier standalone
// --resp-event-loop`: every behaviour must hold in both serving modes.
func TestRESPEventLoop(t *testing.T) {
	respEventLoop = true
	defer func() { respEventLoop = false }()
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"RedisCLI", TestRESPRedisCLI},
		{"PipeAndScan", TestRESPPipeAndScan},
		{"PythonRedis", TestRESPPythonRedis},
		{"ProtocolAndBadInput", TestRESPProtocolAndBadInput},
		{"NoSpace", TestRESPNoSpace},
		{"ThousandConnections", TestRESPThousandConnections},
		{"ExistsImpliesGet", TestRESPExistsImpliesGet},
		{"Auth", TestRESPAuth},
	} {
		t.Run(tc.name, tc.test)
	}
}
