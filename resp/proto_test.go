package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func parseAll(t testing.TB, in string) ([][]string, error) {
	var pool bufPool
	r := newReader(strings.NewReader(in), 64, 1<<20, &pool)
	var out [][]string
	for {
		args, err := r.next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		var cmd []string
		for _, a := range args {
			cmd = append(cmd, string(a))
		}
		out = append(out, cmd)
	}
}

func TestReaderCommands(t *testing.T) {
	big := strings.Repeat("v", bigArg+3) // read into a pooled buffer
	cases := []struct {
		in   string
		want [][]string
	}{
		{"*1\r\n$4\r\nPING\r\n", [][]string{{"PING"}}},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", [][]string{{"SET", "k", ""}}},
		{"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n", [][]string{{"GET", "a"}, {"GET", "b"}}},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + fmt.Sprint(len(big)) + "\r\n" + big + "\r\n", [][]string{{"SET", "k", big}}},
		{"*0\r\n*-1\r\n", [][]string{nil, nil}},
		{"PING\r\n", [][]string{{"PING"}}},
		{"set  k   v\n", [][]string{{"set", "k", "v"}}},
		{"\r\n", [][]string{nil}},
		{`set "a b" 'c\'d' "\x41\n"` + "\r\n", [][]string{{"set", "a b", "c'd", "A\n"}}},
		{"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n", [][]string{{"ECHO", "a\r\nb"}}}, // binary-safe
	}
	for _, c := range cases {
		got, err := parseAll(t, c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestReaderProtocolErrors(t *testing.T) {
	cases := map[string]string{
		"*x\r\n":                        "invalid multibulk length",
		"*99999999\r\n":                 "invalid multibulk length",
		"*1\r\n+OK\r\n":                 "expected '$', got '+'",
		"*1\r\n$-2\r\n":                 "invalid bulk length",
		"*1\r\n$2000000\r\n":            "invalid bulk length", // above maxBulk (1 MiB here)
		"*1\r\n$01\r\na\r\n":            "invalid bulk length",
		"*1\r\n$1\r\nab\r\n":            "not terminated by CRLF",
		"set \"a\r\n":                   "unbalanced quotes",
		"set \"a\"b\r\n":                "unbalanced quotes",
		strings.Repeat("x", 100) + "\n": "too big inline request", // longer than the 64-byte buffer
	}
	for in, want := range cases {
		_, err := parseAll(t, in)
		var pe *errProtocol
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want a protocol error with %q", in, err, want)
		}
	}
	// A request cut short is an unexpected EOF, not a protocol error.
	for _, in := range []string{"*2\r\n$3\r\nGET\r\n", "*1\r\n$3\r\nGE", "PING"} {
		if _, err := parseAll(t, in); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: got %v, want unexpected EOF", in, err)
		}
	}
}

func TestParseInt(t *testing.T) {
	good := map[string]int64{"0": 0, "-1": -1, "42": 42, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63}
	for s, want := range good {
		if n, ok := parseInt([]byte(s)); !ok || n != want {
			t.Errorf("parseInt(%q) = %d, %v", s, n, ok)
		}
	}
	for _, s := range []string{"", "-", "+1", "01", " 1", "1 ", "9223372036854775808", "-9223372036854775809", "1a"} {
		if _, ok := parseInt([]byte(s)); ok {
			t.Errorf("parseInt(%q) accepted", s)
		}
	}
}

func TestWriterReplies(t *testing.T) {
	for _, proto := range []int{2, 3} {
		var b bytes.Buffer
		w := writer{nc: &b, proto: proto}
		w.simple("OK")
		w.error("ERR two\r\nlines")
		w.int(-7)
		w.bulk([]byte("hi"))
		w.null()
		w.mapOf(1)
		w.array(0)
		w.bulk([]byte(strings.Repeat("z", bigBulk)))
		_ = w.flush()
		want := "+OK\r\n-ERR two  lines\r\n:-7\r\n$2\r\nhi\r\n"
		if proto == 2 {
			want += "$-1\r\n*2\r\n*0\r\n"
		} else {
			want += "_\r\n%1\r\n*0\r\n"
		}
		want += fmt.Sprintf("$%d\r\n%s\r\n", bigBulk, strings.Repeat("z", bigBulk))
		if b.String() != want {
			t.Errorf("RESP%d: got %q, want %q", proto, b.String(), want)
		}
	}
}

// encode is what a client library sends for args.
func encode(args [][]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n", len(a))
		b.Write(a)
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// FuzzReader feeds arbitrary bytes to the parser (it must never panic nor
// hand out more than it read), and checks that any command a client
// library encodes comes back unchanged, whatever bytes its arguments hold.
func FuzzReader(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\na\r\n"), []byte("k"), []byte("v"))
	f.Add([]byte("set \"a\\x41\" 'b'\r\n"), []byte(""), []byte("\r\n"))
	f.Add([]byte("*1\r\n$99999999999999999999\r\n"), []byte("*"), []byte("$"))
	f.Fuzz(func(t *testing.T, raw, k, v []byte) {
		var pool bufPool
		r := newReader(bytes.NewReader(raw), 64, 1<<16, &pool)
		for i := 0; i < 100; i++ {
			args, err := r.next()
			if err != nil {
				break
			}
			n := 0
			for _, a := range args {
				n += len(a)
			}
			if n > len(raw) {
				t.Fatalf("parsed %d argument bytes out of %d input bytes", n, len(raw))
			}
		}
		want := [][]byte{[]byte("SET"), k, v}
		r = newReader(bytes.NewReader(append(encode(want), encode(want[:2])...)), 64, 1<<16, &pool)
		for _, w := range [][][]byte{want, want[:2]} {
			got, err := r.next()
			if err != nil {
				t.Fatalf("round trip of %q: %v", w, err)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", w) {
				t.Fatalf("round trip: got %q, want %q", got, w)
			}
		}
	})
}

// TestReaderWatchCompares: a watched long argument is compared while it is
// read, chunk by chunk, and the outcome is reported for that command only.
func TestReaderWatchCompares(t *testing.T) {
	val := bytes.Repeat([]byte("0123456789"), 40000) // 400,000 bytes: several chunks
	for _, tc := range []struct {
		name    string
		cmp     func() []byte
		watched bool
		same    bool
	}{
		{"equal", func() []byte { return bytes.Clone(val) }, true, true},
		{"first byte differs", func() []byte { c := bytes.Clone(val); c[0] = 'x'; return c }, true, false},
		{"last byte differs", func() []byte { c := bytes.Clone(val); c[len(c)-1] = 'x'; return c }, true, false},
		{"not watched", func() []byte { return nil }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool bufPool
			raw := append(encode([][]byte{[]byte("SET"), []byte("k"), val}), encode([][]byte{[]byte("GET"), []byte("k")})...)
			r := newReader(bytes.NewReader(raw), 64, 1<<20, &pool)
			var asked []string
			r.watch = func(args [][]byte, nargs int64, dst []byte) *watchState {
				asked = append(asked, fmt.Sprintf("%s/%d/%d", args[0], nargs, len(dst)))
				if cmp := tc.cmp(); cmp != nil {
					return &watchState{seg: cmp, dst: dst, same: true}
				}
				return nil
			}
			args, err := r.next()
			if err != nil || !bytes.Equal(args[2], val) {
				t.Fatalf("SET: %v", err)
			}
			if r.compared != tc.watched || r.same != tc.same {
				t.Fatalf("compared %v same %v, want %v %v", r.compared, r.same, tc.watched, tc.same)
			}
			if fmt.Sprint(asked) != "[SET/3/400000]" {
				t.Fatalf("watch asked for %v", asked)
			}
			if _, err := r.next(); err != nil {
				t.Fatal(err)
			}
			if r.compared || r.same {
				t.Fatal("the outcome outlived its command")
			}
		})
	}
}
