package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Point is one (x, y) value.
type Point struct{ X, Y float64 }

// Series is one named line.
type Series struct {
	Name   string
	Points []Point
}

// Line is a line chart. The zero value of the formatting fields gives %g labels.
type Line struct {
	Title  string
	XLabel string
	YLabel string
	LogX   bool
	Series []Series
	// XTick formats an x tick label; nil means strconv %g.
	XTick func(x float64) string
	// XTicks are the x positions to label; nil means the distinct x values.
	XTicks []float64
}

const (
	width, height            = 800, 480
	left, right, top, bottom = 80, 190, 50, 60
	plotW                    = width - left - right
	plotH                    = height - top - bottom
	yTicks                   = 5
	markerRadius             = 3.5
	legendRow                = 20
	legendX                  = width - right + 15
	defaultFmt               = 'g'
	fontAttrs                = `font-family="sans-serif" font-size="12"`
	axisColor                = "#333"
	gridColor                = "#ddd"
	backgroundColor          = "#fff"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func ok(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// WriteSVG renders c to w.
func (c *Line) WriteSVG(w io.Writer) error {
	tx := func(x float64) float64 { return x }
	if c.LogX {
		tx = math.Log10
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	var xs []float64
	seen := map[float64]bool{}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !c.valid(p) {
				continue
			}
			xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			ymax = math.Max(ymax, p.Y)
			if !seen[p.X] {
				seen[p.X] = true
				xs = append(xs, p.X)
			}
		}
	}
	if math.IsInf(xmin, 1) { // no data: an empty frame
		xmin, xmax = 1, 10
	}
	if xmin == xmax {
		xmin, xmax = xmin/2, xmax*2
		if !c.LogX {
			xmin, xmax = xmin-1, xmax+1
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax)
	x0, x1 := tx(xmin), tx(xmax)
	px := func(x float64) float64 { return left + (tx(x)-x0)/(x1-x0)*plotW }
	py := func(y float64) float64 { return top + plotH - y/ymax*plotH }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(c.Title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="%s"/>`+"\n", width, height, backgroundColor)
	fmt.Fprintf(&b, `<text x="%d" y="25" font-family="sans-serif" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(c.Title))
	// y grid and ticks
	for i := 0; i <= yTicks; i++ {
		y := ymax * float64(i) / yTicks
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, py(y), left+plotW, py(y), gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" %s text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, fontAttrs, esc(strconv.FormatFloat(y, defaultFmt, 4, 64)))
	}
	// x ticks
	ticks := c.XTicks
	if ticks == nil {
		ticks = xs
	}
	for _, x := range ticks {
		if !ok(x) || (c.LogX && x <= 0) || x < xmin || x > xmax {
			continue
		}
		label := strconv.FormatFloat(x, defaultFmt, 4, 64)
		if c.XTick != nil {
			label = c.XTick(x)
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", px(x), top, px(x), top+plotH, gridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`+"\n", px(x), top+plotH+18, fontAttrs, esc(label))
	}
	// axes and labels
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", left, top+plotH, left+plotW, top+plotH, axisColor)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", left, top, left, top+plotH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s text-anchor="middle">%s</text>`+"\n", left+plotW/2, height-15, fontAttrs, esc(c.XLabel))
	fmt.Fprintf(&b, `<text x="18" y="%d" %s text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>`+"\n", top+plotH/2, fontAttrs, top+plotH/2, esc(c.YLabel))
	// series
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		var pts bytes.Buffer
		for _, p := range s.Points {
			if c.valid(p) {
				fmt.Fprintf(&pts, "%.1f,%.1f ", px(p.X), py(p.Y))
			}
		}
		if pts.Len() > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, bytes.TrimSpace(pts.Bytes()))
		}
		for _, p := range s.Points {
			if c.valid(p) {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s</title></circle>`+"\n",
					px(p.X), py(p.Y), markerRadius, color, esc(fmt.Sprintf("%s: %g, %g", s.Name, p.X, p.Y)))
			}
		}
		ly := top + 10 + i*legendRow
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", legendX, ly, legendX+20, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" %s>%s</text>`+"\n", legendX+26, ly+4, fontAttrs, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func (c *Line) valid(p Point) bool {
	return ok(p.X) && ok(p.Y) && p.Y >= 0 && (!c.LogX || p.X > 0)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e*(1+1e-9) {
			return m * e
		}
	}
	return 10 * e
}
