//go:build cgo

package main

import (
	"runtime"
	"testing"
	"unsafe"
)

// FuzzRegistry runs random register / use / unregister sequences over real
// memory and checks every answer against a plain model: a map from base to
// size with the same rules (same range again: no-op; another size at a base:
// replaces it; use succeeds iff the range lies inside one registered range).
//
//	go test -run '^$' -fuzz FuzzRegistry -fuzztime 30s ./capi/
func FuzzRegistry(f *testing.F) {
	f.Add([]byte{0, 1, 2, 1, 1, 3, 4, 2, 2, 1, 0, 0})
	f.Add([]byte{0, 0, 255, 1, 0, 16, 0, 0, 8, 2, 0, 0, 1, 0, 1})
	const span = 1 << 16
	mem := make([]byte, span+4096)
	base := uintptr(unsafe.Pointer(&mem[0]))
	f.Fuzz(func(t *testing.T, ops []byte) {
		var r registry
		model := map[uintptr]uint64{}
		for i := 0; i+2 < len(ops); i += 3 {
			off := uintptr(ops[i+1]) * 256
			size := uint64(ops[i+2])*256 + 1
			p := base + off
			switch ops[i] % 3 {
			case 0:
				if got := r.register(p, size); got != codeOK {
					t.Fatalf("register(%#x, %d) = %d", off, size, got)
				}
				model[p] = size
			case 1:
				want := false
				for b, n := range model {
					want = want || (uint64(p) >= uint64(b) && uint64(p)+size <= uint64(b)+n)
				}
				done, ok := r.use(p, size)
				if ok != want {
					t.Fatalf("use(%#x, %d) = %v, model says %v (%v)", off, size, ok, want, model)
				}
				if ok {
					// Release at once: unregister waits for users, and this
					// goroutine is the only one.
					done()
				}
			case 2:
				_, in := model[p]
				got := r.unregister(p)
				if (got == codeOK) != in {
					t.Fatalf("unregister(%#x) = %d, model has it: %v", off, got, in)
				}
				delete(model, p)
			}
		}
		if len(r.regions) != len(model) {
			t.Fatalf("%d regions, model %d", len(r.regions), len(model))
		}
		runtime.KeepAlive(mem)
	})
}
