package tests

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

type goPackage struct {
	ImportPath string
	Doc        string
	Deps       []string
	Name       string
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "github.com/kvtier/kvtier/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []goPackage
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// forbidden lists, per package prefix, the kvtier packages it must never
// import (directly or not): imports point down the layers of ARCHITECTURE.md.
var forbidden = map[string][]string{
	"github.com/kvtier/kvtier/master":            {"github.com/kvtier/kvtier/dram", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/rdma", "github.com/kvtier/kvtier/nof", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/rest", "github.com/kvtier/kvtier/webui"},
	"github.com/kvtier/kvtier/client":            {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/rest"},
	"github.com/kvtier/kvtier/appliance":         {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/rest"},
	"github.com/kvtier/kvtier/dram":              {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer"},
	"github.com/kvtier/kvtier/ssd":               {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/api"},
	"github.com/kvtier/kvtier/internal/transfer": {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/api"},
	"github.com/kvtier/kvtier/internal/auth":     {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/internal/fastrpc", "github.com/kvtier/kvtier/api", "github.com/kvtier/kvtier/kverr"},
	"github.com/kvtier/kvtier/internal/fastrpc":  {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/api"},
	"github.com/kvtier/kvtier/nof":               {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/rest"},
	"github.com/kvtier/kvtier/resp":              {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/rest", "github.com/kvtier/kvtier/webui"},
	"github.com/kvtier/kvtier/kverr":             {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client"},
	"github.com/kvtier/kvtier/internal/crc32c":   {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/api", "github.com/kvtier/kvtier/kverr"},
	"github.com/kvtier/kvtier/doctor":            {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/dram", "github.com/kvtier/kvtier/rest", "github.com/kvtier/kvtier/api", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/rdma"},
	"github.com/kvtier/kvtier/capi":              {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/rest"},
	"github.com/kvtier/kvtier/internal/memcopy":  {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/api", "github.com/kvtier/kvtier/kverr"},
	"github.com/kvtier/kvtier/internal/grant":    {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/api", "github.com/kvtier/kvtier/kverr"},
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "github.com/kvtier/kvtier/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		for prefix, bad := range forbidden {
			if pkg != prefix && !strings.HasPrefix(pkg, prefix+"/") {
				continue
			}
			for _, d := range deps {
				for _, b := range bad {
					if d == b || strings.HasPrefix(d, b+"/") {
						t.Errorf("%s imports %s: imports must point down the layers (ARCHITECTURE.md)", pkg, d)
					}
				}
			}
		}
	}
}

func TestEveryPackageHasADocComment(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.Doc == "" {
			t.Errorf("package %s has no package doc comment", p.ImportPath)
		}
	}
}

// transportImpls are the packages that implement a transfer-engine
// transport outside internal/transfer, and who may import each directly:
// the engine's Transport interface is the only way to them (the appliance
// may wire one in; everything else asks the engine, e.g. doctor's RDMA
// probe through transfer.Engine.RDMAStatus).
var transportImpls = map[string][]string{
	"github.com/kvtier/kvtier/rdma": {"github.com/kvtier/kvtier/internal/transfer", "github.com/kvtier/kvtier/appliance"},
}

// TestTransportImplementationsImportedOnlyByTheEngine: nothing outside the
// transfer engine and the appliance imports a transport implementation, in
// either build (with and without the rdma tag).
func TestTransportImplementationsImportedOnlyByTheEngine(t *testing.T) {
	for _, tags := range []string{"", "rdma"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/kvtier/kvtier/...").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		seen := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			pkg := fields[0]
			for _, d := range fields[1:] {
				allowed, ok := transportImpls[d]
				if !ok {
					continue
				}
				seen[d+" by "+pkg] = true
				if !slices.Contains(allowed, pkg) {
					t.Errorf("-tags %q: %s imports transport implementation %s: only %v may (go through transfer.Engine)", tags, pkg, d, allowed)
				}
			}
		}
		if !seen["github.com/kvtier/kvtier/rdma by github.com/kvtier/kvtier/internal/transfer"] {
			t.Errorf("-tags %q: internal/transfer no longer imports rdma: is RDMA still wired in?", tags)
		}
	}
}
