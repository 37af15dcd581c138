// Package htmltest reads parsed HTML (golang.org/x/net/html) for tests of
// the status page: attributes, elements by a predicate or a class, and the
// visible text. Test support only.
package htmltest

import (
	"slices"
	"strings"

	"golang.org/x/net/html"
)

// Attr is the value of n's attribute key, "" when it has none.
func Attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// FindAll returns the elements under n for which ok holds, in document
// order.
func FindAll(n *html.Node, ok func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && ok(c) {
			out = append(out, c)
		}
	}
	return out
}

// HasClass reports whether n has class among its classes.
func HasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(Attr(n, "class")), class)
}

// ByClass returns the elements under n with class.
func ByClass(n *html.Node, class string) []*html.Node {
	return FindAll(n, func(c *html.Node) bool { return HasClass(c, class) })
}

// ByID returns the element under n with id, or nil.
func ByID(n *html.Node, id string) *html.Node {
	if els := FindAll(n, func(c *html.Node) bool { return Attr(c, "id") == id }); len(els) > 0 {
		return els[0]
	}
	return nil
}

// Text is the visible text under n, its whitespace collapsed: the text
// of script, style and title elements is left out.
func Text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode && (c.Parent == nil || (c.Parent.Data != "script" && c.Parent.Data != "style" && c.Parent.Data != "title")) {
			b.WriteString(c.Data)
			b.WriteByte(' ')
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
