package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// parseSVG checks that b is well-formed XML with an <svg> root and counts elements.
func parseSVG(t *testing.T, b []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	counts := map[string]int{}
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b)
		}
		if se, ok := tok.(xml.StartElement); ok {
			// encoding/xml accepts duplicate attributes; XML 1.0 does not.
			seen := map[xml.Name]bool{}
			for _, a := range se.Attr {
				if seen[a.Name] {
					t.Fatalf("<%s> repeats attribute %s", se.Name.Local, a.Name.Local)
				}
				seen[a.Name] = true
			}
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", se.Name.Space)
				}
			}
			counts[se.Name.Local]++
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return counts
}

func TestWriteSVGWellFormed(t *testing.T) {
	c := &Line{
		Title: `Throughput <by> "size" & system`, XLabel: "object size", YLabel: "GB/s", LogX: true,
		Series: []Series{
			{Name: "kvtier", Points: []Point{{65536, 1.2}, {1 << 20, 2.1}, {16 << 20, 2.3}}},
			{Name: "redis & co", Points: []Point{{65536, 0.8}, {1 << 20, 1.7}, {16 << 20, 0}}},
		},
		XTick: func(x float64) string { return strings.Repeat("<", 1) + "x" },
	}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	n := parseSVG(t, b.Bytes())
	if n["polyline"] != 2 {
		t.Errorf("%d polylines, want 2", n["polyline"])
	}
	if n["circle"] != 6 {
		t.Errorf("%d markers, want 6", n["circle"])
	}
}

func TestWriteSVGDegenerate(t *testing.T) {
	for name, c := range map[string]*Line{
		"empty":        {Title: "empty"},
		"single point": {Series: []Series{{Name: "a", Points: []Point{{5, 5}}}}},
		"bad values":   {LogX: true, Series: []Series{{Name: "a", Points: []Point{{0, 1}, {-1, 2}, {3, -1}}}}},
	} {
		var b bytes.Buffer
		if err := c.WriteSVG(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := parseSVG(t, b.Bytes())
		if name == "bad values" && n["circle"] != 0 {
			t.Errorf("%s: invalid points drawn: %d", name, n["circle"])
		}
		if name == "single point" && n["circle"] != 1 {
			t.Errorf("%s: %d markers", name, n["circle"])
		}
		if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
			t.Errorf("%s: non-finite coordinate in output", name)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0.7: 1, 1: 1, 1.3: 2, 3: 5, 7: 10, 0.042: 0.05, 2300: 5000} {
		if got := niceCeil(in); got < want*0.999 || got > want*1.001 {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}
