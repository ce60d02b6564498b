package spdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// frameAll feeds data in pieces of chunk bytes (0 = whole) and returns the
// values and the first error.
func frameAll(data []byte, chunk, max int) ([][]byte, error) {
	f := NewFramer(max)
	var out [][]byte
	if chunk <= 0 {
		chunk = len(data) + 1
	}
	for len(data) > 0 {
		n := min(chunk, len(data))
		f.Feed(data[:n])
		data = data[n:]
		for {
			v, err := f.Next()
			if err != nil {
				return out, err
			}
			if v == nil {
				break
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// decoderValues splits data with encoding/json's stream decoder, the
// independent reference; ok is false if data is not a clean sequence of
// objects/arrays.
func decoderValues(data []byte) (vals [][]byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return vals, true
		}
		if err != nil || (raw[0] != '{' && raw[0] != '[') {
			return nil, false
		}
		vals = append(vals, bytes.Clone(raw))
	}
}

func recordedResponses(t testing.TB) map[string][]byte {
	files, err := filepath.Glob("spdktest/vectors/*.response.raw")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func TestFramerRecordedStreams(t *testing.T) {
	var all []byte
	for name, raw := range recordedResponses(t) {
		all = append(all, raw...)
		want, ok := decoderValues(raw)
		if !ok {
			t.Fatalf("%s: reference decoder rejects recording", name)
		}
		for _, chunk := range []int{0, 1, 2, 7, 64} {
			got, err := frameAll(raw, chunk, 0)
			if err != nil || len(got) != len(want) {
				t.Fatalf("%s chunk %d: %d values, err %v; want %d", name, chunk, len(got), err, len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("%s chunk %d value %d differs", name, chunk, i)
				}
				if _, err := DecodeReplies(got[i]); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
	// Every recorded reply back to back, one byte per read.
	got, err := frameAll(all, 1, 0)
	want, _ := decoderValues(all)
	if err != nil || len(got) != len(want) || len(got) < 60 {
		t.Fatalf("concatenated: %d values (%v), want %d", len(got), err, len(want))
	}
}

func TestFramerErrors(t *testing.T) {
	for _, in := range []string{`5`, `"x"`, `null`, `{"a":1}x`, `}`, "\x00"} {
		if _, err := frameAll([]byte(in), 0, 0); !errors.Is(err, ErrFraming) {
			t.Errorf("%q: got %v", in, err)
		}
	}
	// Size limit, both for a finished value and one still arriving.
	if _, err := frameAll([]byte(`{"a":"0123456789"}`), 0, 8); !errors.Is(err, ErrFraming) {
		t.Errorf("limit (complete): %v", err)
	}
	if _, err := frameAll([]byte(`{"a":"0123456789`), 3, 8); !errors.Is(err, ErrFraming) {
		t.Errorf("limit (partial): %v", err)
	}
	// Braces inside strings and escaped quotes do not confuse it.
	got, err := frameAll([]byte(`{"m":"}{\"]["} [1,{"x":"\\"}]`), 1, 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("strings: %q %v", got, err)
	}
	// An error is sticky.
	f := NewFramer(0)
	f.Feed([]byte("x"))
	if _, err := f.Next(); err == nil {
		t.Fatal("no error")
	}
	f.Feed([]byte(`{}`))
	if _, err := f.Next(); err == nil {
		t.Fatal("error not sticky")
	}
}

func TestDecodeReplies(t *testing.T) {
	rs, err := DecodeReplies([]byte(`[{"jsonrpc":"2.0","id":351,"result":{"version":"SPDK v26.05"}},{"jsonrpc":"2.0","id":352,"error":{"code":-32601,"message":"Method not found"}}]`))
	if err != nil || len(rs) != 2 || rs[0].ID != 351 || rs[1].Err == nil || rs[1].Err.Code != -32601 {
		t.Fatalf("%+v %v", rs, err)
	}
	rs, err = DecodeReplies([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}`))
	if err != nil || !rs[0].HasNullID() || rs[0].Err.Message != "Invalid request" {
		t.Fatalf("%+v %v", rs, err)
	}
	rs, err = DecodeReplies([]byte(`{"jsonrpc":"2.0","id":"req-abc","result":true}`))
	if err != nil || rs[0].HasNumericID() || rs[0].HasNullID() {
		t.Fatalf("%+v %v", rs, err)
	}
	rs, err = DecodeReplies([]byte(`{"jsonrpc":"2.0","id":7,"result":null}`))
	if err != nil || string(rs[0].Result) != "null" || rs[0].Err != nil {
		t.Fatalf("null result: %+v %v", rs, err)
	}
	for _, bad := range []string{`[]`, `[1]`, `{}`, `{"id":1,"error":{"message":"no code"}}`, `{"id":1,"result":1,"error":{"code":1}}`, `{"jsonrpc":2,"id":1,"result":1}`, ` `} {
		if _, err := DecodeReplies([]byte(bad)); !errors.Is(err, ErrBadReply) {
			t.Errorf("%s: got %v", bad, err)
		}
	}
}

// FuzzFramer checks, for any byte stream: no panic; the same values and the
// same error-or-not whatever the read sizes; agreement with encoding/json's
// stream decoder whenever that decoder accepts the stream; and DecodeReplies
// never panics on a framed value.
func FuzzFramer(f *testing.F) {
	for _, raw := range recordedResponses(f) {
		f.Add(raw, uint8(1))
	}
	f.Add([]byte(`{"a":"}"}{"b":[1,2,{"c":"\"{"}]}`), uint8(3))
	f.Add([]byte("\n\n[{}]  {}\n"), uint8(2))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":true}{"jsonrpc": oops}`), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, werr := frameAll(data, 0, 1<<16)
		split, serr := frameAll(data, int(chunk%17)+1, 1<<16)
		if (werr == nil) != (serr == nil) || len(whole) != len(split) {
			t.Fatalf("whole %d/%v vs split %d/%v", len(whole), werr, len(split), serr)
		}
		for i := range whole {
			if !bytes.Equal(whole[i], split[i]) {
				t.Fatalf("value %d differs", i)
			}
			rs, err := DecodeReplies(whole[i])
			if err == nil && len(rs) == 0 {
				t.Fatal("no replies and no error")
			}
		}
		if ref, ok := decoderValues(data); ok && len(data) < 1<<16 {
			if werr != nil || len(ref) != len(whole) {
				t.Fatalf("reference %d values, framer %d (%v)", len(ref), len(whole), werr)
			}
			for i := range ref {
				if !bytes.Equal(ref[i], whole[i]) {
					t.Fatalf("value %d: framer %q reference %q", i, whole[i], ref[i])
				}
			}
		}
	})
}
