package resp

// globMatch matches s against a Redis glob pattern (redis-server's
// stringmatchlen): * any run, ? any byte, [abc] [^a] [a-z] classes, \x a
// literal x. Iterative with one backtrack point (the last *), so that a
// pattern of many stars costs O(len(p) * len(s)), not exponential time.
func globMatch(p, s []byte) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		if pi < len(p) && p[pi] == '*' {
			star, mark = pi, si
			pi++
			continue
		}
		if pi < len(p) {
			if ok, n := matchOne(p[pi:], s[si]); ok {
				pi += n
				si++
				continue
			}
		}
		if star < 0 {
			return false
		}
		// Let the last star take one more byte and try again from there.
		mark++
		pi, si = star+1, mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchOne matches one byte c against the pattern token at the start of p
// (not a star) and returns whether it matched and the token's length.
func matchOne(p []byte, c byte) (bool, int) {
	switch p[0] {
	case '?':
		return true, 1
	case '\\':
		if len(p) >= 2 {
			return p[1] == c, 2
		}
		return c == '\\', 1
	case '[':
		i := 1
		not := i < len(p) && p[i] == '^'
		if not {
			i++
		}
		match := false
		for i < len(p) && p[i] != ']' {
			switch {
			case p[i] == '\\' && i+1 < len(p):
				i++
				if p[i] == c {
					match = true
				}
			case i+2 < len(p) && p[i+1] == '-':
				lo, hi := p[i], p[i+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				if c >= lo && c <= hi {
					match = true
				}
				i += 2
			default:
				if p[i] == c {
					match = true
				}
			}
			i++
		}
		if i < len(p) {
			i++ // the closing ]
		}
		return match != not, i
	default:
		return p[0] == c, 1
	}
}

// literalPrefix is the part of a glob pattern before its first special
// character: every key it matches starts with it.
func literalPrefix(p []byte) string {
	var out []byte
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*', '?', '[':
			return string(out)
		case '\\':
			if i+1 < len(p) {
				i++
			}
		}
		out = append(out, p[i])
	}
	return string(out)
}
