package master

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsStayInTheirLayer fails when master imports a mechanism, the
// client SDK or etcd: the control plane must stay a plane.
func TestImportsStayInTheirLayer(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowedKvtier := map[string]bool{"github.com/kvtier/kvtier/kverr": true, "github.com/kvtier/kvtier/internal/clock": true, "github.com/kvtier/kvtier/api/kvtierpb": true,
		"github.com/kvtier/kvtier/internal/grant": true, // signing data-plane grants: standard library only, no mechanism
		"github.com/kvtier/kvtier/internal/auth":  true} // roles and principals: policy, not a mechanism
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p := strings.Trim(im.Path.Value, `"`)
			checked++
			switch {
			case strings.HasPrefix(p, "github.com/kvtier/kvtier/") && !allowedKvtier[p]:
				t.Errorf("%s imports %s", f, p)
			case strings.Contains(p, "etcd"):
				t.Errorf("%s imports %s (HA is out of scope)", f, p)
			case p == "github.com/kvtier/kvtier/api/kvtierpb" && f != "grpc.go" && f != "authz.go": // authz.go: the gRPC edge's interceptor
				t.Errorf("%s uses protobuf types: translate at the edge (grpc.go)", f)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no imports checked")
	}
}
