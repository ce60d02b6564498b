package resp

import (
	"hash/maphash"
	"sync"
)

// recentShards x recentPerShard bounds the keys whose size is remembered.
const (
	recentShards   = 64
	recentPerShard = 1024
)

// recentTable remembers the size of keys this front end stored or served
// lately. SET uses it only to choose the order of its steps: when the key
// was seen with the new value's size, it first reads the stored value
// (usually served by the client's lease cache, no master call) and, when
// the bytes are equal, is done without a put. A stale entry costs one
// extra read; it never changes what SET does.
type recentTable struct {
	seed   maphash.Seed
	shards [recentShards]struct {
		mu sync.Mutex // guards m
		m  map[string]int
	}
}

func newRecentTable() *recentTable {
	t := &recentTable{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = make(map[string]int)
	}
	return t
}

func (t *recentTable) shard(key string) int {
	return int(maphash.String(t.seed, key) % recentShards)
}

func (t *recentTable) get(key string) (int, bool) {
	sh := &t.shards[t.shard(key)]
	sh.mu.Lock()
	n, ok := sh.m[key]
	sh.mu.Unlock()
	return n, ok
}

func (t *recentTable) put(key string, size int) {
	sh := &t.shards[t.shard(key)]
	sh.mu.Lock()
	if _, ok := sh.m[key]; !ok && len(sh.m) >= recentPerShard {
		clear(sh.m) // a cheap bound; losing entries only costs the fast path
	}
	sh.m[key] = size
	sh.mu.Unlock()
}

func (t *recentTable) drop(key string) {
	sh := &t.shards[t.shard(key)]
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}
