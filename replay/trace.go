package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// BlockTokens is the number of prompt tokens one hash id stands for.
const BlockTokens = 512

// maxLineBytes bounds one trace line; the longest real line is ~10 KiB.
const maxLineBytes = 16 << 20

// Record is one request of a Mooncake FAST'25 trace.
type Record struct {
	Timestamp    int64   `json:"timestamp"`     // arrival, ms from trace start
	InputLength  int64   `json:"input_length"`  // prompt tokens
	OutputLength int64   `json:"output_length"` // generated tokens
	HashIDs      []int64 `json:"hash_ids"`      // one id per 512-token block, prompt order
}

// Trace is a parsed trace, records in file order (non-decreasing timestamps).
type Trace struct {
	Name    string
	Records []Record
}

// Blocks returns the total number of block references in the trace.
func (t *Trace) Blocks() int64 {
	var n int64
	for i := range t.Records {
		n += int64(len(t.Records[i].HashIDs))
	}
	return n
}

// ParseError reports the 1-based line of the first bad record.
type ParseError struct {
	Line int
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("trace line %d: %v", e.Line, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// rawRecord uses pointers so that missing fields are told apart from zeros.
type rawRecord struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// ParseTrace reads JSON lines from r. Blank lines are skipped. Each record must
// carry all four fields, non-negative lengths and ids, a timestamp not earlier
// than the previous record, and len(hash_ids) == ceil(input_length/512).
// The first bad line is reported as a *ParseError and nothing is returned.
func ParseTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	t := &Trace{}
	line := 0
	prevTS := int64(-1)
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := parseRecord(b)
		if err != nil {
			return nil, &ParseError{Line: line, Err: err}
		}
		if rec.Timestamp < prevTS {
			return nil, &ParseError{Line: line, Err: fmt.Errorf("timestamp %d earlier than previous %d", rec.Timestamp, prevTS)}
		}
		prevTS = rec.Timestamp
		t.Records = append(t.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{Line: line + 1, Err: err}
	}
	return t, nil
}

func parseRecord(b []byte) (Record, error) {
	var raw rawRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Record{}, fmt.Errorf("invalid JSON record: %w", err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("trailing data after the JSON record")
	}
	switch {
	case raw.Timestamp == nil:
		return Record{}, fmt.Errorf("missing field timestamp")
	case raw.InputLength == nil:
		return Record{}, fmt.Errorf("missing field input_length")
	case raw.OutputLength == nil:
		return Record{}, fmt.Errorf("missing field output_length")
	case raw.HashIDs == nil:
		return Record{}, fmt.Errorf("missing field hash_ids")
	}
	rec := Record{Timestamp: *raw.Timestamp, InputLength: *raw.InputLength, OutputLength: *raw.OutputLength, HashIDs: *raw.HashIDs}
	if rec.Timestamp < 0 {
		return Record{}, fmt.Errorf("negative timestamp %d", rec.Timestamp)
	}
	if rec.InputLength < 0 || rec.OutputLength < 0 {
		return Record{}, fmt.Errorf("negative length (input %d, output %d)", rec.InputLength, rec.OutputLength)
	}
	if want := (rec.InputLength + BlockTokens - 1) / BlockTokens; int64(len(rec.HashIDs)) != want {
		return Record{}, fmt.Errorf("%d hash_ids for input_length %d, want %d", len(rec.HashIDs), rec.InputLength, want)
	}
	for i, id := range rec.HashIDs {
		if id < 0 {
			return Record{}, fmt.Errorf("hash_ids[%d] = %d is negative", i, id)
		}
	}
	return rec, nil
}

// LoadTrace parses the trace file at path; Name is set to path.
func LoadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	t, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Name = path
	return t, nil
}
