package rest

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Any key survives EncodeKeyPath → URL path → decode.
func FuzzKeyPathRoundTrip(f *testing.F) {
	for _, s := range []string{"a", "model/layer/7", "~b64:abc", "%", "\x00\xff", "ключ", " space+plus", "a?b#c"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		if len(key) == 0 {
			return
		}
		seg := EncodeKeyPath(key)
		if strings.Contains(seg, "/") {
			t.Fatalf("segment %q holds a slash", seg)
		}
		u, err := url.Parse("http://h/api/v1/objects/" + seg)
		if err != nil {
			t.Fatalf("segment %q is not a valid URL path: %v", seg, err)
		}
		raw := strings.TrimPrefix(u.EscapedPath(), "/api/v1/objects/")
		un, err := url.PathUnescape(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeKeySegment(un)
		if err != nil {
			t.Fatalf("decode %q: %v", un, err)
		}
		if !bytes.Equal(got, key) {
			t.Fatalf("round trip %q -> %q -> %q", key, seg, got)
		}
	})
}

// decodeKeySegment and decodeCursor never panic and refuse with an error.
func FuzzDecodeKeySegment(f *testing.F) {
	for _, s := range []string{"", "~b64:", "~b64:AA", "~b64:***", "~b64:a", "plain", "~b64:AAAA===="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := decodeKeySegment(s)
		if err == nil && len(k) == 0 {
			t.Fatalf("%q decoded to an empty key", s)
		}
		if c, err := decodeCursor(s); err == nil && s != "" && len(c) == 0 {
			t.Fatalf("cursor %q decoded to nothing", s)
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add("HugePages_Total:      16\nHugePages_Free:       8\nHugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\n")
	f.Add("Hugepagesize: 1048576 kB\nHugePages_Total: 99999999999999999999\n")
	f.Add(":::\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		h := parseMeminfoHugePages(strings.NewReader(s))
		if h.PageSize > 0 && h.Bytes != 0 && h.Bytes != h.Total*h.PageSize {
			t.Fatalf("bytes %d != %d * %d", h.Bytes, h.Total, h.PageSize)
		}
	})
}

func TestParseMeminfo(t *testing.T) {
	h := parseMeminfoHugePages(strings.NewReader("MemTotal: 100 kB\nHugePages_Total:      16\nHugePages_Free:       8\nHugePages_Rsvd:  1\nHugePages_Surp: 2\nHugepagesize:       2048 kB\n"))
	want := HugePagesJSON{Total: 16, Free: 8, Reserved: 1, Surplus: 2, PageSize: 2 << 20, Bytes: 32 << 20}
	if h != want {
		t.Fatalf("got %+v want %+v", h, want)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1", "1GiB", "1.5 TiB", "10GB", "-1", "NaN", "1e300G", "G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseSize(s) })
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"512": 512, "2GiB": 2 << 30, "1.5 MiB": 3 << 19, "10GB": 10e9, "4K": 4096} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "NaN", "1e30TiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestRateTracker(t *testing.T) {
	var rt rateTracker
	t0 := time.Unix(1000, 0)
	if r, _ := rt.observe(t0, map[string]uint64{"puts": 10}); r != nil {
		t.Fatalf("rates from one sample: %v", r)
	}
	if r, _ := rt.observe(t0.Add(100*time.Millisecond), map[string]uint64{"puts": 11}); r != nil {
		t.Fatalf("rates over 100 ms: %v", r)
	}
	r, span := rt.observe(t0.Add(4*time.Second), map[string]uint64{"puts": 50})
	if span != 4 || r["puts"] != 10 {
		t.Fatalf("rate %v over %v s", r, span)
	}
	// A counter that went down (master restart) reads 0, not a huge number.
	r, _ = rt.observe(t0.Add(6*time.Second), map[string]uint64{"puts": 3})
	if r["puts"] != 0 {
		t.Fatalf("reset counter rate %v", r["puts"])
	}
	// Old samples fall out of the 10 s window.
	r, span = rt.observe(t0.Add(30*time.Second), map[string]uint64{"puts": 13})
	if r != nil || span != 0 {
		t.Fatalf("rates across a 24 s gap: %v over %v", r, span)
	}
	if len(rt.samples) != 1 {
		t.Fatalf("%d samples kept", len(rt.samples))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{MaxPutBytes: -1}, {KeepAlive: -1}, {RequestTimeout: -1}, {Token: "a b"}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if (Config{}).Validate() != nil {
		t.Error("zero config refused")
	}
}
