package resp

import (
	"strconv"
	"sync"
)

// cursorTableSize bounds the SCAN cursors remembered at once; the oldest
// is forgotten first (a SCAN continuing from it gets "invalid cursor").
const cursorTableSize = 1 << 16

// cursorTable maps SCAN's numeric cursors to the master listing's
// position, the last key returned (its cursors are keys, exclusive).
// Redis clients expect an unsigned decimal cursor, "0" to start and to
// end, so positions are kept here rather than in the cursor.
type cursorTable struct {
	mu   sync.Mutex // guards the fields below
	next uint64
	keys map[uint64]string
	ring []uint64 // issue order, to forget the oldest
	head int
}

func newCursorTable(n int) cursorTable {
	return cursorTable{next: 1, keys: make(map[uint64]string), ring: make([]uint64, n)}
}

// add remembers position and returns its cursor.
func (t *cursorTable) add(position string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.next
	t.next++
	if old := t.ring[t.head]; old != 0 {
		delete(t.keys, old)
	}
	t.ring[t.head] = id
	t.head = (t.head + 1) % len(t.ring)
	t.keys[id] = position
	return strconv.FormatUint(id, 10)
}

// get returns the position of cursor; ok is false for an unknown one.
func (t *cursorTable) get(cursor uint64) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.keys[cursor]
	return p, ok
}
