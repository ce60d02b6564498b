//go:build cgo

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// The tests drive the real library the way its users do: a shared object
// built with -buildmode=c-shared, loaded by a C program (gcc) and by Python
// (ctypes), against a real `kvtier standalone` process. The binaries are
// built once per run, when a test first needs them (fuzz workers and the
// pure-Go tests never do).
var (
	repoDir   string
	buildOnce sync.Once
	binDir    string // kvtier and libkvtier.so
	buildErr  error
)

func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	repoDir = filepath.Dir(wd)
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds bin/kvtier and libkvtier.so into a temporary directory
// (once) and returns it.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "kvtier-capi-")
		if buildErr != nil {
			return
		}
		for _, args := range [][]string{
			{"build", "-o", filepath.Join(binDir, "kvtier"), "github.com/kvtier/kvtier/cmd/kvtier"},
			{"build", "-buildmode=c-shared", "-o", filepath.Join(binDir, "libkvtier.so"), "github.com/kvtier/kvtier/capi"},
		} {
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

var listening = regexp.MustCompile(`listening grpc=(\S+)`)

// startStandalone runs `kvtier standalone` (master and appliance, DRAM
// only, offload off) and returns its gRPC address.
func startStandalone(t testing.TB, dram string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "kvtier"), "standalone", "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--dram", dram, "--hugepages", "off", "--ssd-dir", "",
		"--offload", "off", "--lease-ttl", "5s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(60 * time.Second):
		t.Fatalf("kvtier standalone did not report its address:\n%s", stderr.String())
	}
	return ""
}

// headerCodes are the MOONCAKE_ERROR_* values kvtier_store.h defines.
func headerCodes(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("kvtier_store.h")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^#define MOONCAKE_ERROR_(\w+)\s+\(?(-?\d+)\)?`)
	out := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.Atoi(m[2])
		out[m[1]] = v
	}
	return out
}

// TestCodeTable: every kvtier code has a Mooncake number, the numbers are
// Mooncake's, and the header says the same as the Go table.
func TestCodeTable(t *testing.T) {
	for _, c := range kverr.Codes() {
		if _, ok := mooncakeCodes[c]; !ok {
			t.Errorf("kverr code %s has no entry in mooncakeCodes", c)
		}
	}
	// Mooncake's ErrorCode values (mooncake-store/include/types.h).
	want := map[kverr.Code]int{
		kverr.OK: 0, kverr.InternalError: -1, kverr.NoAvailableHandle: -200, kverr.InvalidKey: -400,
		kverr.InvalidParams: -600, kverr.IllegalClient: -601, kverr.ReplicaIsNotReady: -703,
		kverr.ObjectNotFound: -704, kverr.ObjectAlreadyExists: -705, kverr.ObjectHasLease: -706,
		kverr.LeaseExpired: -707, kverr.TransferFail: -800, kverr.RPCFail: -900,
		kverr.SegmentNotFound: -101, kverr.SegmentAlreadyExists: -102, kverr.ClientNotFound: -103,
		kverr.UnavailableInCurrentStatus: -1010, kverr.FileReadFail: -1102, kverr.FileWriteFail: -1103,
		kverr.QuotaExceeded: -200, kverr.ObjectCountExceeded: -200,
	}
	for c, v := range want {
		if got := codeOf(c.Err()); got != v {
			t.Errorf("codeOf(%s) = %d, want %d", c, got, v)
		}
	}
	if got := codeOf(fmt.Errorf("wrapped: %w", kverr.New(kverr.ObjectHasLease, "k", "leased"))); got != -706 {
		t.Errorf("a wrapped OBJECT_HAS_LEASE maps to %d", got)
	}
	if got := codeOf(fmt.Errorf("not a kverr")); got != -1 {
		t.Errorf("a foreign error maps to %d, want -1", got)
	}
	if got := codeOf(nil); got != 0 {
		t.Errorf("nil maps to %d", got)
	}
	hdr := headerCodes(t)
	if len(hdr) < 15 {
		t.Fatalf("found only %d MOONCAKE_ERROR_* macros in kvtier_store.h", len(hdr))
	}
	for c, v := range mooncakeCodes {
		if hv, ok := hdr[c.String()]; ok && hv != v {
			t.Errorf("kvtier_store.h says MOONCAKE_ERROR_%s = %d, the table %d", c, hv, v)
		}
		found := false
		for _, hv := range hdr {
			found = found || hv == v
		}
		if !found {
			t.Errorf("code %d (for %s) has no MOONCAKE_ERROR_* macro in kvtier_store.h", v, c)
		}
	}
}

// TestCProgram compiles capi/test/store_test.c against the header and the
// library and runs it against a standalone.
func TestCProgram(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the C test program cannot be built (CI installs gcc)")
	}
	addr := startStandalone(t, "256MiB")
	binDir := binaries(t)
	prog := filepath.Join(t.TempDir(), "store_test")
	build := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-O1", "-o", prog, "test/store_test.c",
		"-I.", "-L"+binDir, "-lkvtier", "-lpthread", "-Wl,-rpath,"+binDir)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(prog, addr).CombinedOutput()
	t.Logf("store_test output:\n%s", out)
	if err != nil {
		t.Fatalf("store_test: %v", err)
	}
	if !strings.Contains(string(out), "\nPASS\n") || strings.Contains(string(out), "FAIL") {
		t.Fatal("store_test did not pass")
	}
	if n := strings.Count(string(out), "\nok "); n < 50 {
		t.Fatalf("store_test ran only %d checks", n)
	}
}

// python returns a python3 that imports numpy and torch, or why there is none.
func python() (string, string) {
	why := "no python3 on PATH"
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "-c", "import numpy, torch").CombinedOutput()
		if err == nil {
			return path, ""
		}
		why = fmt.Sprintf("%s cannot import numpy and torch (install python3-numpy python3-torch): %s", path, strings.TrimSpace(string(out)))
	}
	return "", why
}

func pythonEnv(t testing.TB, addr string) []string {
	return append(os.Environ(), "KVTIER_MASTER="+addr, "KVTIER_LIB="+filepath.Join(binaries(t), "libkvtier.so"),
		"PYTHONPATH="+filepath.Join(repoDir, "python"), "PYTHONDONTWRITEBYTECODE=1")
}

// TestPython runs python/tests (unittest) against a standalone.
func TestPython(t *testing.T) {
	py, why := python()
	if py == "" {
		t.Skip(why)
	}
	addr := startStandalone(t, "256MiB")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", filepath.Join(repoDir, "python", "tests"), "-p", "test_*.py")
	cmd.Env = pythonEnv(t, addr)
	out, err := cmd.CombinedOutput()
	t.Logf("python -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("python tests failed: %v", err)
	}
	if !regexp.MustCompile(`Ran (\d+) tests`).Match(out) || strings.Contains(string(out), "skipped") {
		t.Fatal("python tests did not all run")
	}
}

// TestPythonCheckout: in a checkout where `make build` ran, PYTHONPATH=python
// is all `import kvtier` needs: it finds bin/libkvtier.so.
func TestPythonCheckout(t *testing.T) {
	py, why := python()
	if py == "" {
		t.Skip(why)
	}
	root := t.TempDir()
	if out, err := exec.Command("cp", "-r", filepath.Join(repoDir, "python"), filepath.Join(root, "python")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", filepath.Join(binaries(t), "libkvtier.so"), filepath.Join(root, "bin")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	check := exec.Command(py, "-c", "import kvtier; print(kvtier.library_path()); print(kvtier.error_name(-200))")
	check.Dir = t.TempDir()
	check.Env = append(envWithout("KVTIER_LIB=", "PYTHONPATH="), "PYTHONPATH="+filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("import kvtier: %v\n%s", err, out)
	}
	if want := filepath.Join(root, "bin", "libkvtier.so") + "\nNO_AVAILABLE_HANDLE\n"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func envWithout(prefixes ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		keep := true
		for _, p := range prefixes {
			keep = keep && !strings.HasPrefix(e, p)
		}
		if keep {
			env = append(env, e)
		}
	}
	return env
}

// TestPythonPackage: `pip install ./python` ships the library inside the
// package, and the installed package loads it without KVTIER_LIB.
func TestPythonPackage(t *testing.T) {
	py, why := python()
	if py == "" {
		t.Skip(why)
	}
	if err := exec.Command(py, "-m", "pip", "--version").Run(); err != nil {
		t.Skipf("%s has no pip: cannot test `pip install ./python`", py)
	}
	target := t.TempDir()
	// Build from a copy: an in-tree build would leave build/ in the checkout.
	src := filepath.Join(t.TempDir(), "python")
	if out, err := exec.Command("cp", "-r", filepath.Join(repoDir, "python"), src).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	install := exec.Command(py, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--target", target, src)
	install.Env = append(os.Environ(), "KVTIER_LIB="+filepath.Join(binaries(t), "libkvtier.so"), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	check := exec.Command(py, "-c", "import kvtier; print(kvtier.library_path()); print(kvtier.error_name(-706))")
	check.Dir = t.TempDir()
	check.Env = append(envWithout("KVTIER_LIB=", "PYTHONPATH="), "PYTHONPATH="+target)
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("import kvtier after pip install: %v\n%s", err, out)
	}
	want := filepath.Join(target, "kvtier", "libkvtier.so") + "\nOBJECT_HAS_LEASE\n"
	if string(out) != want {
		t.Fatalf("installed package says %q, want %q", out, want)
	}
}

// BenchmarkPythonVsGoSDK moves 1 MiB blocks in batches of 16 through the
// Go SDK (this process) and through the Python package (batch_put_from,
// batch_get_into over libkvtier.so, in one long-lived python3) against the
// same standalone, alternating Go and Python phases after a warm-up of each. Go puts with BatchPut; Go reads half its rounds with BatchGet
// (which allocates the values) and half with GetInto per key on 16
// goroutines into a preallocated buffer (what libkvtier does for
// batch_get_into): the ratios put-py/go, get-py/go-batchget and
// get-py/go-getinto compare Python with each.
//
//	go test -run '^$' -bench PythonVsGoSDK -benchtime 1x ./capi/
func BenchmarkPythonVsGoSDK(b *testing.B) {
	pyPath, why := python()
	if pyPath == "" {
		b.Skip(why)
	}
	const block, batch, rounds, phases = 1 << 20, 16, 25, 3
	addr := startStandalone(b, "512MiB")
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{MasterAddr: addr})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	src := make([]byte, block*batch)
	for i := range src {
		src[i] = byte(i*7 + i>>20)
	}
	values := make([][]byte, batch)
	for i := range values {
		values[i] = src[i*block : (i+1)*block]
	}
	dst := make([]byte, block*batch)
	var goPut, goGet, goGetInto, pyPut, pyGet time.Duration
	var goBytes, goGetBytes, goGetIntoBytes, pyBytes float64
	// One long-lived Python process, as the Go side is one long-lived
	// process: a fresh process pays for its first touch of the store's
	// shared memory.
	py := exec.Command(pyPath, filepath.Join(repoDir, "python", "tests", "bench_batch.py"), addr,
		"--block", strconv.Itoa(block), "--batch", strconv.Itoa(batch), "--serve")
	py.Env = pythonEnv(b, addr)
	py.Stderr = os.Stderr
	stdin, err := py.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := py.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := py.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = py.Wait() }()
	lines := bufio.NewScanner(stdout)
	pyRun := func(rounds int) map[string]float64 {
		fmt.Fprintln(stdin, rounds)
		if !lines.Scan() {
			b.Fatalf("bench_batch.py stopped: %v", lines.Err())
		}
		var res map[string]float64
		if err := json.Unmarshal(lines.Bytes(), &res); err != nil {
			b.Fatalf("bench_batch.py printed %q: %v", lines.Text(), err)
		}
		if res["errors"] != 0 {
			b.Fatalf("bench_batch.py: %v rounds failed", res["errors"])
		}
		return res
	}
	goRound := func(tag string, r int, measure bool) {
		keys := make([]string, batch)
		for j := range keys {
			keys[j] = fmt.Sprintf("bench/go/%s/%d/%d", tag, r, j)
		}
		t0 := time.Now()
		for _, err := range c.BatchPut(ctx, keys, values) {
			if err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		// Half the rounds read with BatchGet (allocates the values), half
		// with GetInto per key on 16 goroutines into one preallocated
		// buffer, what libkvtier does for batch_get_into. Each round reads
		// its keys once, as the Python side does.
		errs := make([]error, batch)
		if r%2 == 0 {
			_, errs = c.BatchGet(ctx, keys)
		} else {
			parallel(batch, func(j int) { _, errs[j] = c.GetInto(ctx, keys[j], dst[j*block:(j+1)*block]) })
		}
		t2 := time.Now()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		c.BatchRemove(ctx, keys, true)
		if !measure {
			return
		}
		goPut += t1.Sub(t0)
		goBytes += block * batch
		if r%2 == 0 {
			goGet += t2.Sub(t1)
			goGetBytes += block * batch
		} else {
			goGetInto += t2.Sub(t1)
			goGetIntoBytes += block * batch
		}
	}
	// Warm both sides up (connections, first touch of shared memory).
	for r := range rounds {
		goRound("warm", r, false)
	}
	pyRun(rounds)
	for i := 0; i < b.N; i++ {
		for ph := range phases {
			for r := range rounds {
				goRound(fmt.Sprintf("%d/%d", i, ph), r, true)
			}
			res := pyRun(rounds)
			pyPut += time.Duration(res["put_s"] * float64(time.Second))
			pyGet += time.Duration(res["get_s"] * float64(time.Second))
			pyBytes += res["put_bytes"]
		}
	}
	gbps := func(bytes float64, d time.Duration) float64 { return bytes / d.Seconds() / 1e9 }
	b.ReportMetric(gbps(goBytes, goPut), "go-put-GB/s")
	b.ReportMetric(gbps(pyBytes, pyPut), "py-put-GB/s")
	b.ReportMetric(gbps(goGetBytes, goGet), "go-batchget-GB/s")
	b.ReportMetric(gbps(goGetIntoBytes, goGetInto), "go-getinto-GB/s")
	b.ReportMetric(gbps(pyBytes, pyGet), "py-get-GB/s")
	b.ReportMetric(gbps(pyBytes, pyPut)/gbps(goBytes, goPut), "put-py/go")
	b.ReportMetric(gbps(pyBytes, pyGet)/gbps(goGetBytes, goGet), "get-py/go-batchget")
	b.ReportMetric(gbps(pyBytes, pyGet)/gbps(goGetIntoBytes, goGetInto), "get-py/go-getinto")
	b.Logf("GOMAXPROCS %d; %d x %d x 1 MiB per direction and side", runtime.GOMAXPROCS(0), phases*rounds*b.N, batch)
}
