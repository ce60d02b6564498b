package resp

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "bac", false},
		{"*c", "abc", true}, {"a*c", "ac", true}, {"a*c", "abcd", false}, {"h?llo", "hello", true},
		{"h?llo", "hllo", false}, {"h[ae]llo", "hallo", true}, {"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true}, {"h[^e]llo", "hello", false}, {"h[a-b]llo", "hbllo", true},
		{"h[a-b]llo", "hcllo", false}, {`h\*llo`, "h*llo", true}, {`h\*llo`, "hello", false},
		{"vllm:*:key?", "vllm:abc:key1", true}, {"*a*b*", "xxaxxbxx", true}, {"*a*b*", "xxbxxaxx", false},
		{"", "", true}, {"", "a", false}, {"a**", "a", true},
	}
	for _, c := range cases {
		if got := globMatch([]byte(c.p), []byte(c.s)); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
	// Many stars against a long key that does not match: linear-ish, not exponential.
	if globMatch([]byte(strings.Repeat("a*", 30)+"b"), []byte(strings.Repeat("a", 5000))) {
		t.Fatal("matched")
	}
}

func TestLiteralPrefix(t *testing.T) {
	for p, want := range map[string]string{"abc*": "abc", "a?c": "a", `a\*b*`: "a*b", "*": "", "plain": "plain", "x[ab]": "x"} {
		if got := literalPrefix([]byte(p)); got != want {
			t.Errorf("literalPrefix(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestPoolClasses(t *testing.T) {
	var p bufPool
	for _, n := range []int{0, 1, 4096, 4097, 1 << 20, 1<<20 + 1, 1 << maxClassShift, 1<<maxClassShift + 1} {
		b := p.get(n)
		if len(b.b) != n || cap(b.b) < n {
			t.Fatalf("get(%d): len %d cap %d", n, len(b.b), cap(b.b))
		}
		p.put(b)
	}
}
