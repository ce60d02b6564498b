package replay

import (
	"errors"
	"github.com/kvtier/kvtier/internal/shared"
	"strings"
	"testing"
)

var (
	convPath = shared.Path("traces", "conversation_trace.jsonl")
	synPath  = shared.Path("traces", "synthetic_trace.jsonl")
)

func TestParseTraceGood(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 3, "input_length": 1, "output_length": 0, "hash_ids": [7]}
{"timestamp": 3, "input_length": 0, "output_length": 0, "hash_ids": []}
`
	tr, err := ParseTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 3 || tr.Blocks() != 3 {
		t.Fatalf("got %d records, %d blocks", len(tr.Records), tr.Blocks())
	}
	if r := tr.Records[1]; r.Timestamp != 3 || r.InputLength != 1 || r.HashIDs[0] != 7 {
		t.Fatalf("record 1 = %+v", r)
	}
}

func TestParseTraceErrors(t *testing.T) {
	good := `{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [1]}`
	cases := []struct {
		name, line, want string
	}{
		{"bad json", `{"timestamp": 6,`, "invalid JSON"},
		{"not an object", `[1,2]`, "invalid JSON"},
		{"missing timestamp", `{"input_length": 512, "output_length": 1, "hash_ids": [1]}`, "missing field timestamp"},
		{"missing hash_ids", `{"timestamp": 6, "input_length": 512, "output_length": 1}`, "missing field hash_ids"},
		{"unknown field", `{"timestamp": 6, "input_length": 512, "output_length": 1, "hash_ids": [1], "x": 1}`, "unknown field"},
		{"wrong block count", `{"timestamp": 6, "input_length": 513, "output_length": 1, "hash_ids": [1]}`, "want 2"},
		{"negative id", `{"timestamp": 6, "input_length": 512, "output_length": 1, "hash_ids": [-1]}`, "negative"},
		{"negative length", `{"timestamp": 6, "input_length": -1, "output_length": 1, "hash_ids": []}`, "negative length"},
		{"time goes back", `{"timestamp": 4, "input_length": 512, "output_length": 1, "hash_ids": [1]}`, "earlier than previous"},
		{"float timestamp", `{"timestamp": 6.5, "input_length": 512, "output_length": 1, "hash_ids": [1]}`, "invalid JSON"},
		{"trailing data", good + ` {}`, "trailing data"},
	}
	for _, c := range cases {
		in := good + "\n\n" + c.line + "\n" + good
		_, err := ParseTrace(strings.NewReader(in))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want *ParseError", c.name, err)
			continue
		}
		if pe.Line != 3 {
			t.Errorf("%s: line %d, want 3", c.name, pe.Line)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%s: error %q does not mention %q and line 3", c.name, err, c.want)
		}
	}
}

func TestLoadTraceFiles(t *testing.T) {
	for _, c := range []struct {
		path            string
		records, blocks int64
	}{{convPath, 12031, 288500}, {synPath, 3993, 121877}} {
		tr, err := LoadTrace(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(tr.Records)) != c.records || tr.Blocks() != c.blocks {
			t.Errorf("%s: %d records %d blocks, want %d %d", c.path, len(tr.Records), tr.Blocks(), c.records, c.blocks)
		}
	}
	if _, err := LoadTrace("/nonexistent/trace.jsonl"); err == nil {
		t.Error("missing file: no error")
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte(`{"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": [3]}` + "\n" + `{"timestamp": 0}`))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"timestamp": 9223372036854775807, "input_length": 9223372036854775807, "output_length": 0, "hash_ids": []}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ParseTrace(strings.NewReader(string(b)))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		prev := int64(-1)
		for _, r := range tr.Records {
			if r.Timestamp < prev || r.InputLength < 0 || r.OutputLength < 0 {
				t.Fatalf("invalid record accepted: %+v", r)
			}
			if int64(len(r.HashIDs)) != (r.InputLength+BlockTokens-1)/BlockTokens {
				t.Fatalf("block count not checked: %+v", r)
			}
			prev = r.Timestamp
		}
	})
}
