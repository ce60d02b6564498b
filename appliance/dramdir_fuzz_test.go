package appliance

import (
	"strconv"
	"testing"
)

// FuzzDramDir applies commit and free sequences to the directory and to a
// model (which commit owns each 64-byte unit): after each step the
// directory holds exactly the model's live commits, none overlapping.
func FuzzDramDir(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 3, 1, 1, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const units = 32
		d := newDramDir()
		owner := make([]int, units) // 0: none; else the commit's number
		starts := map[int]uint64{}  // commit number -> its first unit
		drop := func(o int) {
			for v := range owner {
				if owner[v] == o {
					owner[v] = 0
				}
			}
			delete(starts, o)
		}
		for i := 0; i+2 < len(ops); i += 3 {
			off, n := uint64(ops[i+1]%units), uint64(ops[i+2]%4)+1
			n = min(n, units-off)
			if ops[i]%2 == 0 {
				id := i + 1
				for u := off; u < off+n; u++ {
					if o := owner[u]; o != 0 { // a commit drops every entry it overlaps
						drop(o)
					}
				}
				for u := off; u < off+n; u++ {
					owner[u] = id
				}
				starts[id] = off
				d.commit("s", dramEntry{off: off * 64, size: n * 64, key: strconv.Itoa(id)})
			} else {
				if o := owner[off]; o != 0 && starts[o] == off {
					drop(o)
				}
				d.free("s", off*64)
			}
			es := d.snapshot()["s"]
			if len(es) != len(starts) {
				t.Fatalf("directory holds %d entries, the model %d", len(es), len(starts))
			}
			for j, e := range es {
				if j > 0 && es[j-1].off+es[j-1].size > e.off {
					t.Fatalf("entries overlap: %+v %+v", es[j-1], e)
				}
				id, _ := strconv.Atoi(e.key)
				if s, ok := starts[id]; !ok || s*64 != e.off {
					t.Fatalf("entry %+v is not in the model", e)
				}
			}
		}
	})
}
