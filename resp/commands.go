package resp

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// command is one entry of the command table.
type command struct {
	name   string
	arity  int // as redis-server: the exact count with the name, or -N for at least N
	flags  []string
	first  int // first key argument (COMMAND's key specs), 0 for none
	last   int
	step   int
	noAuth bool // allowed before AUTH
	// inline: an event loop runs it itself (it never waits long: no
	// listing, no removal); other commands are run by the connection's
	// goroutine (loop_linux.go).
	inline bool
	run    func(c *conn, args [][]byte) (quit bool)
}

// commands is the command table, filled once by init and only read
// afterwards (a table in init because COMMAND lists the table itself).
var commands map[string]*command

func init() {
	list := []*command{
		{name: "get", inline: true, arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, run: cmdGet},
		{name: "set", inline: true, arity: -3, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1, run: cmdSet},
		{name: "exists", inline: true, arity: -2, flags: []string{"readonly", "fast"}, first: 1, last: -1, step: 1, run: cmdExists},
		{name: "del", arity: -2, flags: []string{"write"}, first: 1, last: -1, step: 1, run: cmdDel},
		{name: "unlink", arity: -2, flags: []string{"write", "fast"}, first: 1, last: -1, step: 1, run: cmdDel},
		{name: "mget", arity: -2, flags: []string{"readonly", "fast"}, first: 1, last: -1, step: 1, run: cmdMGet},
		{name: "mset", arity: -3, flags: []string{"write", "denyoom"}, first: 1, last: -1, step: 2, run: cmdMSet},
		{name: "ping", inline: true, arity: -1, flags: []string{"fast"}, run: cmdPing},
		{name: "echo", inline: true, arity: 2, flags: []string{"fast"}, run: cmdEcho},
		{name: "quit", inline: true, arity: -1, flags: []string{"fast"}, noAuth: true, run: cmdQuit},
		{name: "auth", inline: true, arity: -2, flags: []string{"noscript", "loading", "stale", "fast"}, noAuth: true, run: cmdAuth},
		{name: "hello", inline: true, arity: -1, flags: []string{"noscript", "loading", "stale", "fast"}, noAuth: true, run: cmdHello},
		{name: "select", inline: true, arity: 2, flags: []string{"loading", "stale", "fast"}, run: cmdSelect},
		{name: "client", inline: true, arity: -2, flags: []string{"noscript", "loading", "stale"}, run: cmdClient},
		{name: "info", arity: -1, flags: []string{"loading", "stale"}, run: cmdInfo},
		{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}, run: cmdDBSize},
		{name: "scan", arity: -2, flags: []string{"readonly"}, run: cmdScan},
		{name: "ttl", inline: true, arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, run: cmdTTL},
		{name: "pttl", inline: true, arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, run: cmdTTL},
		{name: "expire", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, run: cmdExpire},
		{name: "pexpire", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, run: cmdExpire},
		{name: "persist", arity: 2, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, run: cmdPersist},
		{name: "type", inline: true, arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, run: cmdType},
		{name: "strlen", inline: true, arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, run: cmdStrlen},
		{name: "command", arity: -1, flags: []string{"loading", "stale"}, run: cmdCommand},
		{name: "config", arity: -2, flags: []string{"admin", "noscript", "loading", "stale"}, run: cmdConfig},
	}
	commands = make(map[string]*command, len(list))
	for _, c := range list {
		commands[c.name] = c
	}
}

// lookup finds a command by its name, in any case; nil for none.
func (c *conn) lookup(name []byte) *command {
	if len(name) > len(c.lower) {
		return nil
	}
	n := copy(c.lower[:], name)
	for i := range n {
		if b := c.lower[i]; b >= 'A' && b <= 'Z' {
			c.lower[i] = b + 'a' - 'A'
		}
	}
	return commands[string(c.lower[:n])] // no allocation: the compiler looks up by the bytes
}

// exec runs one command and reports whether the connection should close.
func (c *conn) exec(args [][]byte) bool {
	cmd := c.lookup(args[0])
	if cmd == nil {
		c.unknown(args)
		return false
	}
	if cmd.arity > 0 && len(args) != cmd.arity || cmd.arity < 0 && len(args) < -cmd.arity {
		c.w.error("ERR wrong number of arguments for '" + cmd.name + "' command")
		return false
	}
	if !c.authed && !cmd.noAuth {
		c.w.error("NOAUTH Authentication required.")
		return false
	}
	return cmd.run(c, args)
}

// unknown answers like redis-server, quoting the first arguments.
func (c *conn) unknown(args [][]byte) {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.WriteString(clip(args[0]))
	b.WriteString("', with args beginning with: ")
	for _, a := range args[1:min(len(args), 6)] {
		b.WriteString("'")
		b.WriteString(clip(a))
		b.WriteString("' ")
	}
	c.w.error(b.String())
}

// clip shortens an argument quoted in an error message.
func clip(b []byte) string {
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}

// storeErr answers a refusal of the store. The message starts with the
// kvtier code name; out-of-space codes use the NOSPACE error word so that
// clients (and inference engines) can back off on it without parsing.
func (c *conn) storeErr(err error) {
	code := kverr.CodeOf(err)
	word := "ERR "
	switch code {
	case kverr.NoAvailableHandle, kverr.QuotaExceeded, kverr.ObjectCountExceeded:
		word = "NOSPACE "
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, code.String()) {
		msg = code.String() + " " + msg
	}
	c.w.error(word + msg)
}

// missing reports whether a Get error means "no such key" to a Redis
// client: not stored, still being written (not visible yet), or bytes that
// failed their checksum (a miss, never wrong bytes).
func missing(err error) bool {
	switch kverr.CodeOf(err) {
	case kverr.ObjectNotFound, kverr.ReplicaIsNotReady, kverr.ChecksumMismatch:
		return true
	}
	return false
}

// readAttempts bounds retries of a Get whose read lease ran out during the
// transfer (the client asks again for a fresh lease).
const readAttempts = 3

// get reads key into a pooled buffer. A missing key is (nil, nil). The
// caller gives the buffer back with pool.put.
func (c *conn) get(key []byte) (*buffer, error) {
	s := c.s
	var b *buffer
	alloc := func(size uint64) ([]byte, error) {
		if size > 1<<40 {
			return nil, kverr.New(kverr.InternalError, string(key), "object size %d", size)
		}
		if b == nil || uint64(cap(b.b)) < size {
			s.pool.put(b)
			b = s.pool.get(int(size))
		}
		b.b = b.b[:size]
		return b.b, nil
	}
	k := string(key)
	// Shared: a read's replica list must not outlive a removal of the
	// key by this front end in the lease cache (keyLock).
	l := s.keyLock(k)
	l.RLock()
	defer l.RUnlock()
	for attempt := 1; ; attempt++ {
		n, err := s.store.GetWith(s.ctx, k, alloc)
		if err == nil {
			b.b = b.b[:n]
			return b, nil
		}
		if kverr.Is(err, kverr.LeaseExpired) && attempt < readAttempts {
			continue
		}
		s.pool.put(b)
		if missing(err) {
			return nil, nil
		}
		return nil, err
	}
}

func cmdGet(c *conn, args [][]byte) bool {
	if c.s.cfg.Segments != nil {
		if handled, quit := c.getInPlace(args[1]); handled {
			return quit
		}
	}
	b, err := c.get(args[1])
	switch {
	case err != nil:
		c.storeErr(err)
	case b == nil:
		c.s.misses.Add(1)
		c.w.null()
	default:
		c.s.hits.Add(1)
		c.s.recent.put(string(args[1]), len(b.b))
		c.w.bulk(b.b)
		c.s.pool.put(b)
	}
	return false
}

// setOptions are SET's options.
type setOptions struct {
	nx, xx bool
	ttl    time.Duration // EX/PX: soft-pin time; 0 none
}

func parseSetOptions(args [][]byte) (setOptions, string) {
	var o setOptions
	for i := 0; i < len(args); i++ {
		a := strings.ToLower(string(args[i]))
		switch a {
		case "nx":
			o.nx = true
		case "xx":
			o.xx = true
		case "ex", "px", "exat", "pxat":
			if o.ttl != 0 || i+1 == len(args) {
				return o, "ERR syntax error"
			}
			i++
			n, ok := parseInt(args[i])
			if !ok {
				return o, "ERR value is not an integer or out of range"
			}
			var d time.Duration
			switch a {
			case "ex":
				d = time.Duration(n) * time.Second
			case "px":
				d = time.Duration(n) * time.Millisecond
			case "exat":
				d = time.Until(time.Unix(n, 0))
			case "pxat":
				d = time.Until(time.UnixMilli(n))
			}
			if n <= 0 || n > 1<<40 || d <= 0 {
				return o, "ERR invalid expire time in 'set' command"
			}
			o.ttl = d
		default:
			return o, "ERR syntax error"
		}
	}
	if o.nx && o.xx {
		return o, "ERR syntax error"
	}
	return o, ""
}

func cmdSet(c *conn, args [][]byte) bool {
	if c.r.lost {
		// Its value was compared with the stored one while it arrived,
		// and the part dropped as equal could not be taken back.
		c.storeErr(kverr.New(kverr.LeaseExpired, string(args[1]), "the value arrived too slowly to be kept; nothing was stored; try again"))
		return false
	}
	o, bad := parseSetOptions(args[3:])
	if bad != "" {
		c.w.error(bad)
		return false
	}
	ok, err := c.set(string(args[1]), args[2], o)
	switch {
	case c.yield:
		// An event loop's connection: its goroutine runs SET again.
		return false
	case err != nil:
		c.storeErr(err)
	case ok:
		c.s.suspects.drop(string(args[1]))
		c.w.simple("OK")
	default:
		c.w.null()
	}
	return false
}

// setAttempts bounds how often a SET retries while another writer's put of
// the same key is in flight (the key cannot be replaced until it ends), and
// setRetryBudget how long: a try itself may wait (the master holds a
// removal up to 5 s for an SSD copy being made), and 40 such tries could
// keep a client waiting minutes for a copy that never lands (reasoned, not
// seen: TestRetriesLeft checks the bound).
const (
	setAttempts    = 40
	setRetryBudget = 2 * time.Second
)

// retriesLeft reports whether a loop that started at start may try again
// after attempt tries.
func retriesLeft(start time.Time, attempt int) bool {
	return attempt < setAttempts && time.Since(start) < setRetryBudget
}

// set stores val under key with Redis's SET semantics on top of
// write-once objects; see the package doc ("SET of an existing key").
// It reports whether the value was set (false: NX/XX refused it).
func (c *conn) set(key string, val []byte, o setOptions) (bool, error) {
	s := c.s
	if o.xx {
		ok, err := s.store.Exist(s.ctx, key)
		if err != nil || !ok {
			return false, err
		}
	}
	if !o.nx && o.ttl == 0 {
		if same, known := c.receivedSame(key, val); known {
			if same {
				return true, nil
			}
		} else if n, ok := s.recent.get(key); ok && n == len(val) && c.holds(key, val) {
			return true, nil
		}
	}
	var opts []client.PutOption
	if o.ttl > 0 {
		opts = append(opts, client.WithSoftPin(o.ttl))
	}
	backoff := 50 * time.Microsecond
	start := time.Now()
	var notReady error // why the old object could not be removed, last time
	for attempt := 1; ; attempt++ {
		res, err := s.store.PutWithResult(s.ctx, key, val, opts...)
		switch {
		case err == nil && !res.AlreadyStored:
			s.recent.put(key, len(val))
			return true, nil
		case err == nil || kverr.Is(err, kverr.ObjectAlreadyExists):
			if o.nx {
				return false, nil
			}
			// Same size: when the stored bytes are these, the key already
			// holds the value (the common case of content-derived keys),
			// and nothing needs replacing.
			if err == nil && o.ttl == 0 && c.holds(key, val) {
				s.recent.put(key, len(val))
				return true, nil
			}
			if c.raw != nil && c.raw.nowait {
				// An event loop does not replace: removing and putting
				// again may wait (retries while another writer's put is
				// in flight). Nothing changed yet, nothing was answered:
				// the connection's goroutine runs this SET again.
				c.yield = true
				return false, nil
			}
			// Replace: remove the old object (force: a reader's lease
			// must not make SET fail), then put again.
			switch rerr := c.forceRemove(key); {
			case kverr.Is(rerr, kverr.ReplicaIsNotReady):
				notReady = rerr
			case rerr != nil && !kverr.Is(rerr, kverr.ObjectNotFound):
				return false, rerr
			}
		default:
			return false, err
		}
		if !retriesLeft(start, attempt) {
			if notReady != nil {
				return false, notReady
			}
			return false, kverr.New(kverr.ReplicaIsNotReady, key, "another writer keeps storing this key; try again")
		}
		if err := sleep(s.ctx, backoff); err != nil {
			return false, err
		}
		backoff = min(2*backoff, 5*time.Millisecond)
	}
}

// remove deletes key with force, waiting (as set does) while a put of it
// is in flight. A missing key is OBJECT_NOT_FOUND.
func (c *conn) remove(key string) error {
	s := c.s
	s.recent.drop(key)
	backoff := 50 * time.Microsecond
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.forceRemove(key)
		if !kverr.Is(err, kverr.ReplicaIsNotReady) || !retriesLeft(start, attempt) {
			return err
		}
		if err := sleep(s.ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 5*time.Millisecond)
	}
}

// forceRemove removes key past read leases, once no in-place GET of this
// front end reads it (keyLock).
func (c *conn) forceRemove(key string) error {
	l := c.s.keyLock(key)
	l.Lock()
	defer l.Unlock()
	// SETs comparing their value with this object's bytes as it arrives
	// take what they compared from it now (watch.go).
	c.s.watching.keepAll(key)
	return c.s.store.Remove(c.s.ctx, key, true)
}

// holds reports whether key's stored value is val (false also when the
// read fails: the caller then takes the slow path, which reports errors).
func (c *conn) holds(key string, val []byte) bool {
	if c.s.cfg.Segments != nil {
		if same, ok := c.holdsInPlace(key, val); ok {
			return same
		}
	}
	b, err := c.get([]byte(key))
	if err != nil || b == nil {
		return false
	}
	same := bytes.Equal(b.b, val)
	c.s.pool.put(b)
	return same
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return kverr.New(kverr.RPCFail, "", "server closing")
	}
}

// cmdExists answers from the master's replica lists, which grant the read
// lease a GET takes (see the package doc, "EXISTS"): a key counted here
// cannot be evicted before the GET that follows it, within --lease-ttl.
func cmdExists(c *conn, args [][]byte) bool {
	s := c.s
	keys := args[1:]
	if len(keys) == 1 {
		_, err := s.store.Query(s.ctx, string(keys[0]))
		switch {
		case err == nil:
			c.w.int(1)
		case missing(err):
			c.w.int(0)
		default:
			c.storeErr(err)
		}
		return false
	}
	resp, err := s.store.Master().BatchGetReplicaList(s.ctx, &kvtierpb.BatchKeysRequest{
		ClientId: s.store.ID(), Tenant: s.store.Tenant(), Keys: keys})
	if err != nil {
		c.storeErr(kverr.FromGRPC(err))
		return false
	}
	if len(resp.Results) != len(keys) {
		c.storeErr(kverr.New(kverr.RPCFail, "", "master answered %d results for %d keys", len(resp.Results), len(keys)))
		return false
	}
	n := int64(0)
	for i, r := range resp.Results {
		switch e := kverr.Code(r.Code); {
		case e == kverr.OK:
			n++
		case !missing(&kverr.Error{Code: e}):
			c.storeErr(&kverr.Error{Code: e, Key: string(keys[i]), Msg: r.Message})
			return false
		}
	}
	c.w.int(n)
	return false
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// cmdDel removes keys, forcing past read leases (a Redis DEL does not
// wait for readers). A key whose put is in flight is removed once the put
// ends; one still in flight after the retries is reported as an error,
// after the other keys were removed.
func cmdDel(c *conn, args [][]byte) bool {
	var n int64
	var first error
	for _, k := range args[1:] {
		err := c.remove(string(k))
		switch {
		case err == nil:
			n++
		case kverr.Is(err, kverr.ObjectNotFound):
		default:
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		c.storeErr(first)
		return false
	}
	c.w.int(n)
	return false
}

func cmdMGet(c *conn, args [][]byte) bool {
	c.w.array(len(args) - 1)
	for _, k := range args[1:] {
		b, err := c.get(k)
		switch {
		case err != nil:
			c.storeErr(err)
		case b == nil:
			c.s.misses.Add(1)
			c.w.null()
		default:
			c.s.hits.Add(1)
			c.w.bulk(b.b)
			c.s.pool.put(b)
		}
	}
	return false
}

// cmdMSet sets each pair in order. Not atomic (kvtier has no multi-key
// transactions): on an error the pairs before it are set, the rest not.
func cmdMSet(c *conn, args [][]byte) bool {
	if len(args)%2 != 1 {
		c.w.error("ERR wrong number of arguments for 'mset' command")
		return false
	}
	// A pair that can never be stored refuses the command before any pair
	// is stored (Redis's MSET is all or nothing; a failure of the store
	// midway still leaves the pairs before it stored, doc.go).
	for i := 1; i < len(args); i += 2 {
		if err := client.CheckItem(string(args[i]), args[i+1]); err != nil {
			c.storeErr(err)
			return false
		}
	}
	for i := 1; i < len(args); i += 2 {
		if _, err := c.set(string(args[i]), args[i+1], setOptions{}); err != nil {
			c.storeErr(err)
			return false
		}
	}
	c.w.simple("OK")
	return false
}

func cmdPing(c *conn, args [][]byte) bool {
	switch len(args) {
	case 1:
		c.w.simple("PONG")
	case 2:
		c.w.bulk(args[1])
	default:
		c.w.error("ERR wrong number of arguments for 'ping' command")
	}
	return false
}

func cmdEcho(c *conn, args [][]byte) bool {
	c.w.bulk(args[1])
	return false
}

func cmdQuit(c *conn, _ [][]byte) bool {
	c.w.simple("OK")
	return true
}

// auth checks a password (user must be "default", the only user).
func (c *conn) auth(user, pass []byte) string {
	if c.s.cfg.Password == "" {
		return "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	}
	if user != nil && string(user) != "default" ||
		subtle.ConstantTimeCompare(pass, []byte(c.s.cfg.Password)) != 1 {
		return "WRONGPASS invalid username-password pair or user is disabled."
	}
	c.authed = true
	return ""
}

func cmdAuth(c *conn, args [][]byte) bool {
	var bad string
	switch len(args) {
	case 2:
		bad = c.auth(nil, args[1])
	case 3:
		bad = c.auth(args[1], args[2])
	default:
		bad = "ERR syntax error"
	}
	if bad != "" {
		c.w.error(bad)
		return false
	}
	c.w.simple("OK")
	return false
}

// cmdHello: HELLO [protover [AUTH user pass] [SETNAME name]].
func cmdHello(c *conn, args [][]byte) bool {
	proto := c.w.proto
	var name []byte
	var authUser, authPass []byte
	if len(args) > 1 {
		v, ok := parseInt(args[1])
		if !ok {
			c.w.error("ERR Protocol version is not an integer or out of range")
			return false
		}
		if v != 2 && v != 3 {
			c.w.error("NOPROTO unsupported protocol version")
			return false
		}
		proto = int(v)
		for i := 2; i < len(args); i++ {
			switch strings.ToLower(string(args[i])) {
			case "auth":
				if i+2 >= len(args) {
					c.w.error("ERR Syntax error in HELLO option 'auth'")
					return false
				}
				authUser, authPass = args[i+1], args[i+2]
				i += 2
			case "setname":
				if i+1 >= len(args) {
					c.w.error("ERR Syntax error in HELLO option 'setname'")
					return false
				}
				name = args[i+1]
				i++
			default:
				c.w.error("ERR Syntax error in HELLO option '" + clip(args[i]) + "'")
				return false
			}
		}
	}
	if authPass != nil {
		if bad := c.auth(authUser, authPass); bad != "" {
			c.w.error(bad)
			return false
		}
	}
	if !c.authed {
		c.w.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return false
	}
	if name != nil {
		if !validName(name) {
			c.w.error("ERR Client names cannot contain spaces, newlines or special characters.")
			return false
		}
		c.name = string(name)
	}
	c.w.proto = proto
	c.w.mapOf(7)
	c.w.bulkString("server")
	c.w.bulkString("redis")
	c.w.bulkString("version")
	c.w.bulkString(redisVersion)
	c.w.bulkString("proto")
	c.w.int(int64(proto))
	c.w.bulkString("id")
	c.w.int(c.id)
	c.w.bulkString("mode")
	c.w.bulkString("standalone")
	c.w.bulkString("role")
	c.w.bulkString("master")
	c.w.bulkString("modules")
	c.w.array(0)
	return false
}

// redisVersion is the redis-server version the front end answers as:
// the one whose commands and replies it follows (clients pick features
// by it).
const redisVersion = "7.2.0"

func validName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func cmdSelect(c *conn, args [][]byte) bool {
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		c.w.error("ERR value is not an integer or out of range")
	case n != 0:
		c.w.error("ERR DB index is out of range")
	default:
		c.w.simple("OK")
	}
	return false
}

func cmdClient(c *conn, args [][]byte) bool {
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "setname" && len(args) == 3:
		if !validName(args[2]) {
			c.w.error("ERR Client names cannot contain spaces, newlines or special characters.")
			return false
		}
		c.name = string(args[2])
		c.w.simple("OK")
	case sub == "getname" && len(args) == 2:
		if c.name == "" {
			c.w.null()
		} else {
			c.w.bulkString(c.name)
		}
	case sub == "id" && len(args) == 2:
		c.w.int(c.id)
	case sub == "setinfo" && len(args) == 4:
		v := string(args[3])
		if !validName(args[3]) {
			c.w.error("ERR " + strings.ToUpper(string(args[2])) + " cannot contain spaces, newlines or special characters.")
			return false
		}
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			c.libName = v
		case "lib-ver":
			c.libVer = v
		default:
			c.w.error("ERR Unrecognized option '" + clip(args[2]) + "'")
			return false
		}
		c.w.simple("OK")
	case sub == "info" && len(args) == 2:
		c.w.bulkString(c.describe() + "\n")
	case sub == "list" && len(args) == 2:
		c.w.bulkString(c.s.clientList())
	case (sub == "setname" || sub == "getname" || sub == "id" || sub == "setinfo" || sub == "info" || sub == "list"):
		c.w.error("ERR wrong number of arguments for 'client|" + sub + "' command")
	default:
		c.w.error("ERR unknown subcommand '" + clip(args[1]) + "'. Try CLIENT HELP.")
	}
	return false
}

// describe is the connection's CLIENT LIST line.
func (c *conn) describe() string {
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=-1 name=%s age=%d db=0 resp=%d lib-name=%s lib-ver=%s",
		c.id, c.addr, c.nc.LocalAddr(), c.name, int(time.Since(c.since).Seconds()), c.w.proto, c.libName, c.libVer)
}

// clientList describes this connection only in full; the others are
// named by id and address (their names belong to their goroutines).
func (s *Server) clientList() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for c := range s.conns {
		fmt.Fprintf(&b, "id=%d addr=%s db=0\n", c.id, c.addr)
	}
	return b.String()
}

func cmdDBSize(c *conn, _ [][]byte) bool {
	st, err := c.s.stats()
	if err != nil {
		c.storeErr(err)
		return false
	}
	c.w.int(int64(st.Objects))
	return false
}

func cmdType(c *conn, args [][]byte) bool {
	ok, err := c.s.store.Exist(c.s.ctx, string(args[1]))
	switch {
	case err != nil:
		c.storeErr(err)
	case ok:
		c.w.simple("string")
	default:
		c.w.simple("none")
	}
	return false
}

func cmdStrlen(c *conn, args [][]byte) bool {
	info, err := c.s.store.Stat(c.s.ctx, string(args[1]))
	switch {
	case kverr.Is(err, kverr.ObjectNotFound):
		c.w.int(0)
	case err != nil:
		c.storeErr(err)
	case info.CreatedMs == 0: // still being written: not visible yet
		c.w.int(0)
	default:
		c.w.int(int64(info.Size))
	}
	return false
}

// cmdCommand: COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS.
func cmdCommand(c *conn, args [][]byte) bool {
	if len(args) == 1 {
		c.w.array(len(commands))
		for _, cmd := range commands {
			c.commandInfo(cmd)
		}
		return false
	}
	switch strings.ToLower(string(args[1])) {
	case "count":
		c.w.int(int64(len(commands)))
	case "info":
		c.w.array(len(args) - 2)
		for _, a := range args[2:] {
			if cmd := commands[strings.ToLower(string(a))]; cmd != nil {
				c.commandInfo(cmd)
			} else {
				c.w.null()
			}
		}
	case "docs":
		c.w.mapOf(0) // no documentation to offer: redis-cli falls back to its own
	default:
		c.w.error("ERR unknown subcommand '" + clip(args[1]) + "'. Try COMMAND HELP.")
	}
	return false
}

func (c *conn) commandInfo(cmd *command) {
	c.w.array(6)
	c.w.bulkString(cmd.name)
	c.w.int(int64(cmd.arity))
	c.w.array(len(cmd.flags))
	for _, f := range cmd.flags {
		c.w.simple(f)
	}
	c.w.int(int64(cmd.first))
	c.w.int(int64(cmd.last))
	c.w.int(int64(cmd.step))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
