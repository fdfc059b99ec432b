package main

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
)

// A small hand-written SVG line chart: axes, ticks, grid, labels, legend,
// one polyline with markers per series, optional vertical range bands.

type point struct {
	x, y   float64
	hollow bool // drawn hollow: measured on a lab whose self-check failed
}

type series struct {
	name   string
	color  string
	marker string // circle, square, triangle, diamond, none
	dashed bool
	dx     float64 // pixels: sideways offset so coinciding series stay visible
	z      int     // drawing order: higher is drawn later (on top)
	pts    []point
}

// band is a vertical range at x (e.g. a published min-max).
type band struct {
	x, lo, hi float64
}

type chart struct {
	title, subtitle  string
	xlabel, ylabel   string
	xmin, xmax       float64
	ymin, ymax       float64
	xticks           []float64
	xtickLabel       func(float64) string
	ytickLabel       func(float64) string
	series           []series
	bands            []band
	bandLabel        string
	footnotes        []string
	width, height    int
	left, right, top int
	bottom           int
}

func newChart() *chart {
	return &chart{width: 820, height: 540, left: 80, right: 220, top: 64, bottom: 110}
}

// niceStep picks a 1/2/5 x 10^k tick step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func (c *chart) px(x float64) float64 {
	w := float64(c.width - c.left - c.right)
	return float64(c.left) + (x-c.xmin)/(c.xmax-c.xmin)*w
}

func (c *chart) py(y float64) float64 {
	h := float64(c.height - c.top - c.bottom)
	return float64(c.height-c.bottom) - (y-c.ymin)/(c.ymax-c.ymin)*h
}

func esc(s string) string { return html.EscapeString(s) }

func (c *chart) marker(b *strings.Builder, kind string, x, y float64, color string, hollow bool) {
	fill := color
	if hollow {
		fill = "white"
	}
	attr := fmt.Sprintf(`fill="%s" stroke="%s" stroke-width="1.6"`, fill, color)
	switch kind {
	case "circle":
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="4.5" %s/>`+"\n", x, y, attr)
	case "square":
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="8" height="8" %s/>`+"\n", x-4, y-4, attr)
	case "triangle":
		fmt.Fprintf(b, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" %s/>`+"\n", x, y-5.5, x-5, y+4, x+5, y+4, attr)
	case "diamond":
		fmt.Fprintf(b, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" %s/>`+"\n", x, y-5.5, x+5, y, x, y+5.5, x-5, y, attr)
	}
}

func (c *chart) svg() string {
	var b strings.Builder
	W, H := c.width, c.height
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", c.left, esc(c.title))
	if c.subtitle != "" {
		fmt.Fprintf(&b, `<text x="%d" y="46" font-size="12" fill="#444">%s</text>`+"\n", c.left, esc(c.subtitle))
	}
	x0, x1 := c.px(c.xmin), c.px(c.xmax)
	y0, y1 := c.py(c.ymin), c.py(c.ymax)

	// grid and y ticks
	step := niceStep(c.ymax-c.ymin, 6)
	for v := math.Ceil(c.ymin/step) * step; v <= c.ymax+step*1e-9; v += step {
		y := c.py(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0-5, y, x0, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", x0-8, y, esc(c.ytickLabel(v)))
	}
	// x ticks
	for _, v := range c.xticks {
		x := c.px(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/>`+"\n", x, y0, x, y1)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x, y0, x, y0+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+20, esc(c.xtickLabel(v)))
	}
	// axes
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="1.2"/>`+"\n", x0, y0, x1, y0)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="1.2"/>`+"\n", x0, y0, x0, y1)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+42, esc(c.xlabel))
	fmt.Fprintf(&b, `<text transform="translate(%d,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", 22, (y0+y1)/2, esc(c.ylabel))

	// bands
	for _, bd := range c.bands {
		x := c.px(bd.x) + 16 // beside the markers at x, not over them
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="%.1f" fill="#bbbbbb" fill-opacity="0.45" stroke="#888" stroke-width="0.8"/>`+"\n",
			x-7, c.py(bd.hi), c.py(bd.lo)-c.py(bd.hi))
	}
	// series, lowest z first
	order := make([]series, len(c.series))
	copy(order, c.series)
	sort.SliceStable(order, func(i, j int) bool { return order[i].z < order[j].z })
	for _, s := range order {
		if len(s.pts) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", c.px(p.x)+s.dx, c.py(p.y)))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="7,5"`
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
		for _, p := range s.pts {
			c.marker(&b, s.marker, c.px(p.x)+s.dx, c.py(p.y), s.color, p.hollow)
		}
	}
	// legend
	lx, ly := float64(W-c.right+20), float64(c.top+10)
	for _, s := range c.series {
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="7,5"`
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+30, ly, s.color, dash)
		c.marker(&b, s.marker, lx+15, ly, s.color, false)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>`+"\n", lx+38, ly, esc(s.name))
		ly += 24
	}
	if len(c.bands) > 0 {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="16" fill="#bbbbbb" fill-opacity="0.45" stroke="#888" stroke-width="0.8"/>`+"\n", lx+8, ly-8)
		for i, line := range strings.Split(c.bandLabel, "\n") {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>`+"\n", lx+38, ly+float64(i)*16, esc(line))
		}
	}
	// footnotes
	fy := float64(H - 22)
	for i := len(c.footnotes) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" fill="#444">%s</text>`+"\n", c.left, fy, esc(c.footnotes[i]))
		fy -= 15
	}
	b.WriteString("</svg>\n")
	return b.String()
}
