package resp

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// stats asks the master for the store's figures (INFO, DBSIZE).
func (s *Server) stats() (*kvtierpb.StatsResponse, error) {
	st, err := s.store.Master().Stats(s.ctx, &kvtierpb.Empty{})
	return st, kverr.FromGRPC(err)
}

func tier(st *kvtierpb.StatsResponse, name string) *kvtierpb.TierStats {
	for _, t := range st.Tiers {
		if t.Tier == name {
			return t
		}
	}
	return &kvtierpb.TierStats{}
}

// infoSections are INFO's sections in redis-server's order.
var infoSections = []string{"server", "clients", "memory", "stats", "keyspace"}

func cmdInfo(c *conn, args [][]byte) bool {
	want := map[string]bool{}
	for _, a := range args[1:] {
		switch sec := strings.ToLower(string(a)); sec {
		case "all", "default", "everything":
			for _, n := range infoSections {
				want[n] = true
			}
		default:
			want[sec] = true
		}
	}
	if len(args) == 1 {
		for _, n := range infoSections {
			want[n] = true
		}
	}
	st, err := c.s.stats()
	if err != nil {
		c.storeErr(err)
		return false
	}
	s := c.s
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	for _, sec := range infoSections {
		if !want[sec] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		switch sec {
		case "server":
			b.WriteString("# Server\r\n")
			up := time.Since(s.start)
			line("redis_version", redisVersion)
			line("kvtier_version", s.cfg.Version)
			line("redis_mode", "standalone")
			line("os", runtime.GOOS+" "+runtime.GOARCH)
			line("arch_bits", 64)
			line("process_id", os.Getpid())
			line("tcp_port", s.port.Load())
			line("uptime_in_seconds", int64(up.Seconds()))
			line("uptime_in_days", int64(up.Hours()/24))
		case "clients":
			b.WriteString("# Clients\r\n")
			line("connected_clients", s.nConns.Load())
			line("maxclients", s.cfg.MaxClients)
			line("blocked_clients", 0)
		case "memory":
			b.WriteString("# Memory\r\n")
			m := tier(st, "memory")
			line("used_memory", m.Used)
			line("used_memory_human", human(m.Used))
			line("maxmemory", m.Capacity)
			line("maxmemory_human", human(m.Capacity))
			line("maxmemory_policy", maxmemoryPolicy)
			line("kvtier_master_heap_bytes", st.HeapBytes)
			d := tier(st, "disk")
			line("kvtier_ssd_used", d.Used)
			line("kvtier_ssd_capacity", d.Capacity)
		case "stats":
			b.WriteString("# Stats\r\n")
			line("total_connections_received", s.connsTotal.Load())
			line("total_commands_processed", s.commands.Load())
			line("rejected_connections", s.rejected.Load())
			line("expired_keys", 0)
			line("evicted_keys", st.Counters["evictions"])
			line("keyspace_hits", s.hits.Load())
			line("keyspace_misses", s.misses.Load())
		case "keyspace":
			b.WriteString("# Keyspace\r\n")
			if st.Objects > 0 {
				fmt.Fprintf(&b, "db0:keys=%d,expires=0,avg_ttl=0\r\n", st.Objects)
			}
		}
	}
	c.w.bulkString(b.String())
	return false
}

// maxmemoryPolicy is what INFO and CONFIG GET report: kvtier's DRAM tier
// evicts in lease order (earliest read-lease deadline first, pinned
// objects last), the nearest Redis policy being allkeys-lru.
const maxmemoryPolicy = "allkeys-lru"

func human(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// cmdConfig: CONFIG GET pattern... answers maxmemory* and the few settings
// tools read at start (redis-benchmark asks for save and appendonly);
// CONFIG SET is refused (kvtier's tiers are set with `kvtier tiers set`
// or the REST API).
func cmdConfig(c *conn, args [][]byte) bool {
	switch strings.ToLower(string(args[1])) {
	case "get":
		if len(args) < 3 {
			c.w.error("ERR wrong number of arguments for 'config|get' command")
			return false
		}
		st, err := c.s.stats()
		if err != nil {
			c.storeErr(err)
			return false
		}
		params := [][2]string{
			{"maxmemory", itoa(int64(tier(st, "memory").Capacity))},
			{"maxmemory-policy", maxmemoryPolicy},
			{"maxmemory-samples", "5"},
			{"maxmemory-eviction-tenacity", "10"},
			{"maxmemory-clients", "0"},
			{"databases", "1"},
			{"save", ""},
			{"appendonly", "no"},
			{"maxclients", itoa(int64(c.s.cfg.MaxClients))},
			{"proto-max-bulk-len", itoa(int64(c.s.cfg.MaxValueSize))},
		}
		var hit [][2]string
		for _, p := range params {
			for _, pat := range args[2:] {
				if globMatch(bytesLower(pat), []byte(p[0])) {
					hit = append(hit, p)
					break
				}
			}
		}
		c.w.mapOf(len(hit))
		for _, p := range hit {
			c.w.bulkString(p[0])
			c.w.bulkString(p[1])
		}
	case "set":
		c.w.error("ERR CONFIG SET is not supported by kvtier's Redis front end; change tiers with `kvtier tiers set` or PUT /api/v1/tiers")
	case "resetstat":
		c.s.hits.Store(0)
		c.s.misses.Store(0)
		c.s.commands.Store(0)
		c.w.simple("OK")
	default:
		c.w.error("ERR unknown subcommand '" + clip(args[1]) + "'. Try CONFIG HELP.")
	}
	return false
}

func bytesLower(b []byte) []byte { return []byte(strings.ToLower(string(b))) }

// scanCount is SCAN's default COUNT, as redis-server's.
const scanCount = 10

// cmdScan: SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]. The cursor
// walks the master's listing in key order; COUNT is how many keys the
// master lists per call, MATCH filters them (so a call may return fewer,
// even none, before the cursor reaches 0, as redis-server's may). The
// literal prefix of the pattern narrows the listing itself.
func cmdScan(c *conn, args [][]byte) bool {
	cur, ok := parseUint(args[1])
	if !ok {
		c.w.error("ERR invalid cursor")
		return false
	}
	var pattern []byte
	count := int64(scanCount)
	typ := ""
	for i := 2; i < len(args); i++ {
		if i+1 == len(args) {
			c.w.error("ERR syntax error")
			return false
		}
		switch strings.ToLower(string(args[i])) {
		case "match":
			pattern = args[i+1]
		case "count":
			n, ok := parseInt(args[i+1])
			if !ok {
				c.w.error("ERR value is not an integer or out of range")
				return false
			}
			if n < 1 {
				c.w.error("ERR syntax error")
				return false
			}
			count = min(n, 100000)
		case "type":
			typ = strings.ToLower(string(args[i+1]))
		default:
			c.w.error("ERR syntax error")
			return false
		}
		i++
	}
	after := ""
	if cur != 0 {
		p, ok := c.s.cursors.get(cur)
		if !ok {
			c.w.error("ERR invalid cursor")
			return false
		}
		after = p
	}
	var prefix string
	if pattern != nil {
		prefix = literalPrefix(pattern)
	}
	objs, next, err := c.s.store.List(c.s.ctx, prefix, after, int(count))
	if err != nil {
		c.storeErr(err)
		return false
	}
	var keys [][]byte
	if typ == "" || typ == "string" {
		for _, o := range objs {
			if o.CreatedMs == 0 {
				continue // still being written: not a key yet
			}
			if pattern == nil || globMatch(pattern, o.Key) {
				keys = append(keys, o.Key)
			}
		}
	}
	c.w.array(2)
	if next == "" {
		c.w.bulkString("0")
	} else {
		c.w.bulkString(c.s.cursors.add(next))
	}
	c.w.array(len(keys))
	for _, k := range keys {
		c.w.bulk(k)
	}
	return false
}

func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// cmdTTL answers TTL and PTTL from the soft pin, the only deadline a
// kvtier object has: -2 when the key is missing, the soft pin's time left
// while it runs, else -1 (no deadline). See the package doc: the key is
// not deleted when it reaches 0, it only loses its protection from
// eviction.
func cmdTTL(c *conn, args [][]byte) bool {
	info, err := c.s.store.Stat(c.s.ctx, string(args[1]))
	switch {
	case kverr.Is(err, kverr.ObjectNotFound):
		c.w.int(-2)
		return false
	case err != nil:
		c.storeErr(err)
		return false
	case info.CreatedMs == 0:
		c.w.int(-2)
		return false
	}
	left := time.Until(time.UnixMilli(info.SoftPinDeadlineMs))
	if !info.SoftPin || info.SoftPinDeadlineMs == 0 || left <= 0 {
		c.w.int(-1)
		return false
	}
	if args[0][0] == 'p' || args[0][0] == 'P' {
		c.w.int(left.Milliseconds())
	} else {
		c.w.int(int64((left + time.Second/2) / time.Second))
	}
	return false
}

// cmdExpire: EXPIRE key seconds / PEXPIRE key ms. A positive time soft-
// pins the object for that long (re-storing it: pins are set at put); zero
// or less deletes it, as redis-server does.
func cmdExpire(c *conn, args [][]byte) bool {
	if len(args) != 3 {
		c.w.error("ERR unsupported option: kvtier's EXPIRE takes no NX/XX/GT/LT")
		return false
	}
	n, ok := parseInt(args[2])
	if !ok || n > 1<<40 || n < -(1<<40) {
		c.w.error("ERR value is not an integer or out of range")
		return false
	}
	unit := time.Second
	if args[0][0] == 'p' || args[0][0] == 'P' {
		unit = time.Millisecond
	}
	if n <= 0 {
		err := c.remove(string(args[1]))
		switch {
		case err == nil:
			c.w.int(1)
		case kverr.Is(err, kverr.ObjectNotFound):
			c.w.int(0)
		default:
			c.storeErr(err)
		}
		return false
	}
	return c.repinReply(args[1], time.Duration(n)*unit)
}

// cmdPersist soft-pins the key for the master's default soft-pin time
// (PERSIST asks to keep the key; kvtier's nearest promise is a soft pin).
func cmdPersist(c *conn, args [][]byte) bool {
	return c.repinReply(args[1], 0)
}

func (c *conn) repinReply(key []byte, ttl time.Duration) bool {
	ok, err := c.repin(key, ttl)
	switch {
	case err != nil:
		c.storeErr(err)
	default:
		c.w.int(boolInt(ok))
	}
	return false
}

// repin stores key's value again with a soft pin of ttl (0: the master's
// default): kvtier sets pins when an object is put, and objects are
// immutable, so the value is read, the object removed and put again. Not
// atomic: a SET of the key by another connection in between may be
// overwritten by the old value, and a reader in between sees a miss.
func (c *conn) repin(key []byte, ttl time.Duration) (bool, error) {
	s := c.s
	b, err := c.get(key)
	if err != nil || b == nil {
		return false, err
	}
	defer s.pool.put(b)
	k := string(key)
	if err := c.remove(k); err != nil && !kverr.Is(err, kverr.ObjectNotFound) {
		return false, err
	}
	res, err := s.store.PutWithResult(s.ctx, k, b.b, client.WithSoftPin(ttl))
	if err != nil {
		// Do not lose the value for a refused pin (a TTL above the
		// master's limit): store it unpinned and report the refusal.
		if perr := s.store.Put(s.ctx, k, b.b); perr != nil {
			s.log.Warn("resp: value lost while re-pinning", "key", k, "err", perr)
		}
		return false, err
	}
	_ = res // another writer's put in between wins (first writer wins)
	return true, nil
}
