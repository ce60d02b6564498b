package tests

import (
	"encoding/json"
	"io"
	"os/exec"
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
	"github.com/kvtier/kvtier/doctor":            {"github.com/kvtier/kvtier/master", "github.com/kvtier/kvtier/client", "github.com/kvtier/kvtier/appliance", "github.com/kvtier/kvtier/ssd", "github.com/kvtier/kvtier/dram", "github.com/kvtier/kvtier/rest", "github.com/kvtier/kvtier/api"},
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
