package client_test

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestExportedAPINamesNoInternalType: a module that imports the SDK cannot
// spell a type declared under internal/, so every such type reachable from
// the client's exported identifiers (fields, parameters, results) must have
// an exported alias in package client (sdk.go).
func TestExportedAPINamesNoInternalType(t *testing.T) {
	// Export data from the build cache, found through go list (the default
	// importer looks in GOPATH only).
	lookup := func(path string) (io.ReadCloser, error) {
		out, err := exec.Command("go", "list", "-export", "-f", "{{.Export}}", path).Output()
		if err != nil {
			return nil, fmt.Errorf("go list -export %s: %v", path, err)
		}
		return os.Open(strings.TrimSpace(string(out)))
	}
	pkg, err := importer.ForCompiler(token.NewFileSet(), "gc", lookup).Import("github.com/kvtier/kvtier/client")
	if err != nil {
		t.Fatal(err)
	}
	aliased := map[*types.TypeName]bool{}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if tn, ok := scope.Lookup(name).(*types.TypeName); ok && tn.IsAlias() && tn.Exported() {
			if n, ok := types.Unalias(tn.Type()).(*types.Named); ok {
				aliased[n.Obj()] = true
			}
		}
	}
	seen := map[types.Type]bool{}
	var walk func(where string, t types.Type)
	check := func(where string, n *types.Named) {
		p := n.Obj().Pkg()
		if p != nil && strings.Contains(p.Path()+"/", "/internal/") && !aliased[n.Obj()] {
			t.Errorf("%s uses %s.%s, which importers cannot name: add an alias in client/sdk.go", where, p.Path(), n.Obj().Name())
		}
	}
	walk = func(where string, typ types.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		switch u := types.Unalias(typ).(type) {
		case *types.Named:
			check(where, u)
			if u.Obj().Pkg() == pkg {
				walk(where, u.Underlying())
				for i := 0; i < u.NumMethods(); i++ {
					if m := u.Method(i); m.Exported() {
						walk(where+"."+m.Name(), m.Type())
					}
				}
			}
		case *types.Pointer:
			walk(where, u.Elem())
		case *types.Slice:
			walk(where, u.Elem())
		case *types.Array:
			walk(where, u.Elem())
		case *types.Map:
			walk(where, u.Key())
			walk(where, u.Elem())
		case *types.Chan:
			walk(where, u.Elem())
		case *types.Signature:
			for i := 0; i < u.Params().Len(); i++ {
				walk(where, u.Params().At(i).Type())
			}
			for i := 0; i < u.Results().Len(); i++ {
				walk(where, u.Results().At(i).Type())
			}
		case *types.Struct:
			for i := 0; i < u.NumFields(); i++ {
				if f := u.Field(i); f.Exported() {
					walk(where+"."+f.Name(), f.Type())
				}
			}
		}
	}
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			walk(name, obj.Type())
		}
	}
	if len(seen) < 10 {
		t.Fatalf("walked only %d types: the check saw nothing", len(seen))
	}
}
