package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNVMeTargetSurvivesDescriptorExhaustion: an appliance whose
// descriptor limit is lowered (prlimit on the running process) and whose
// NVMe/TCP port is flooded with idle connections runs out of descriptors;
// its target keeps retrying Accept (and says so at warn) instead of
// stopping for good, and once the flood is gone `kvtier nvme identify`
// against it works again.
func TestNVMeTargetSurvivesDescriptorExhaustion(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("prlimit not installed (%v): descriptor exhaustion not tested", err)
	}
	c := startCluster(t)
	img := filepath.Join(t.TempDir(), "ns1.img")
	box := c.appliance("fd-box", "--nvme-addr", "127.0.0.1:0", "--nvme-namespace", img+":16MiB")
	nvmeAddr := box.addrs["nvme"]
	pid := box.cmd.Process.Pid
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Skipf("cannot count the appliance's descriptors: %v", err)
	}
	limit := len(fds) + 32
	if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(pid), "--nofile="+strconv.Itoa(limit)+":"+strconv.Itoa(limit)).CombinedOutput(); err != nil {
		t.Skipf("prlimit --pid %d: %v %s", pid, err, out)
	}
	var flood []net.Conn
	for i := 0; i < 200; i++ {
		nc, err := net.DialTimeout("tcp", nvmeAddr, 2*time.Second)
		if err != nil {
			break
		}
		flood = append(flood, nc)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(box.output(), "nvme-tcp accept failing") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(box.output(), "nvme-tcp accept failing") {
		t.Fatalf("%d flood connections and a limit of %d descriptors, but no accept failure logged:\n%s", len(flood), limit, box.output())
	}
	for _, nc := range flood {
		nc.Close()
	}
	var out, errs string
	var code int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, errs, code = c.cli(t, nil, "nvme", "identify", "--target", nvmeAddr); code == 0 {
			break
		}
	}
	if code != 0 || !strings.Contains(out, box.addrs["nqn"]) {
		t.Fatalf("kvtier nvme identify after the flood: exit %d\n%s\n%s\nappliance:\n%s", code, out, errs, box.output())
	}
	select {
	case <-box.exited:
		t.Fatalf("appliance exited:\n%s", box.output())
	default:
	}
}
