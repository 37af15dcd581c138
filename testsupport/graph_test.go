package testsupport_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// diagram is the "## Package graph" Mermaid block of docs/architecture.md:
// the packages it declares (id["path"]) and its edges (a --> b), by path.
type diagram struct {
	packages map[string]bool
	edges    map[[2]string]bool
}

var (
	declRE = regexp.MustCompile(`^([A-Za-z0-9_]+)\["([^"]+)"\]$`)
	edgeRE = regexp.MustCompile(`^([A-Za-z0-9_]+) --> ([A-Za-z0-9_]+)$`)
)

// readDiagram parses the first mermaid block after the heading of
// docs/architecture.md. A line it does not understand fails the test, so
// the format cannot drift from what is checked.
func readDiagram(t *testing.T, heading string) []string {
	t.Helper()
	f, err := os.Open("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	state := 0 // 0: before the heading, 1: before the block, 2: in it
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case state == 0 && line == heading:
			state = 1
		case state == 1 && line == "```mermaid":
			state = 2
		case state == 2 && line == "```":
			return lines
		case state == 2:
			lines = append(lines, line)
		}
	}
	t.Fatalf("docs/architecture.md: no mermaid block after %q", heading)
	return nil
}

func packageDiagram(t *testing.T) diagram {
	t.Helper()
	d := diagram{packages: map[string]bool{}, edges: map[[2]string]bool{}}
	byID := map[string]string{}
	lines := readDiagram(t, "## Package graph")
	if len(lines) == 0 || lines[0] != "graph TD" {
		t.Fatalf("the package graph starts with %q, want graph TD", lines[0])
	}
	for _, line := range lines[1:] {
		if m := declRE.FindStringSubmatch(line); m != nil {
			if want := strings.ReplaceAll(m[2], "/", "_"); m[1] != want {
				t.Errorf("package graph: %s is declared with the id %s, want %s", m[2], m[1], want)
			}
			if d.packages[m[2]] {
				t.Errorf("package graph: %s declared twice", m[2])
			}
			byID[m[1]], d.packages[m[2]] = m[2], true
		}
	}
	for _, line := range lines[1:] {
		switch m := edgeRE.FindStringSubmatch(line); {
		case m != nil:
			from, to := byID[m[1]], byID[m[2]]
			if from == "" || to == "" {
				t.Errorf("package graph: edge %q names an undeclared package", line)
				continue
			}
			if d.edges[[2]string{from, to}] {
				t.Errorf("package graph: edge %s --> %s twice", from, to)
			}
			d.edges[[2]string{from, to}] = true
		case declRE.MatchString(line), line == "end", line == "", strings.HasPrefix(line, "subgraph "), strings.HasPrefix(line, "%%"):
		default:
			t.Errorf("package graph: line %q is neither a package, an edge nor a subgraph", line)
		}
	}
	return d
}

// TestPackageGraphIsCurrent: docs/architecture.md's package graph has
// every package of the module and exactly the imports their non-test
// files have (go list), so it cannot go stale.
func TestPackageGraphIsCurrent(t *testing.T) {
	real := modulePackages(t)
	doc := packageDiagram(t)
	for _, p := range keys(real) {
		if !doc.packages[p] {
			t.Errorf("package graph lacks the package %s", p)
		}
		for _, dep := range real[p] {
			if !doc.edges[[2]string{p, dep}] {
				t.Errorf("package graph lacks the edge %s --> %s (an import of %s)", p, dep, p)
			}
		}
	}
	for p := range doc.packages {
		if _, ok := real[p]; !ok {
			t.Errorf("package graph has %s, which is no package of the module", p)
		}
	}
	for e := range doc.edges {
		if !slices.Contains(real[e[0]], e[1]) {
			t.Errorf("package graph has the edge %s --> %s, but %s does not import %s", e[0], e[1], e[0], e[1])
		}
	}
}

var (
	stateAliasRE = regexp.MustCompile(`^state "([^"]+)" as ([A-Za-z0-9_]+)$`)
	transitionRE = regexp.MustCompile(`^(\[\*\]|[A-Za-z0-9_]+) --> (\[\*\]|[A-Za-z0-9_]+)(?:: .+)?$`)
)

// codeStates are the values of join's State* string constants (the
// states of TaskStatus.State), read from join's non-test files.
func codeStates(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../join/*.go")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "State") || !id.IsExported() || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						states[v] = true
					}
				}
			}
		}
	}
	if len(states) < 3 {
		t.Fatalf("found the states %v in join; where did TaskStatus.State's constants go?", states)
	}
	return states
}

// TestTaskLifecycleStates: the task lifecycle diagram of
// docs/architecture.md names exactly the states join's tasks report
// (TaskStatus.State), and each state is reached and left.
func TestTaskLifecycleStates(t *testing.T) {
	code := codeStates(t)
	lines := readDiagram(t, "## A task's lifecycle")
	if len(lines) == 0 || lines[0] != "stateDiagram-v2" {
		t.Fatalf("the lifecycle diagram starts with %q, want stateDiagram-v2", lines[0])
	}
	name := map[string]string{} // id → state
	in, out := map[string]bool{}, map[string]bool{}
	for _, line := range lines[1:] {
		if m := stateAliasRE.FindStringSubmatch(line); m != nil {
			name[m[2]] = m[1]
		}
	}
	stateOf := func(id string) string {
		if n, ok := name[id]; ok {
			return n
		}
		return id
	}
	for _, line := range lines[1:] {
		switch m := transitionRE.FindStringSubmatch(line); {
		case m != nil:
			from, to := stateOf(m[1]), stateOf(m[2])
			out[from], in[to] = true, true
			for _, s := range []string{from, to} {
				if s != "[*]" && !code[s] {
					t.Errorf("lifecycle diagram: %q is no state of join's tasks (TaskStatus.State: %v)", s, keysOf(code))
				}
			}
		case stateAliasRE.MatchString(line), line == "":
		default:
			t.Errorf("lifecycle diagram: line %q is neither a state nor a transition", line)
		}
	}
	for s := range code {
		if !in[s] || !out[s] {
			t.Errorf("lifecycle diagram: the state %q is not both entered and left (entered %v, left %v)", s, in[s], out[s])
		}
	}
	if !out["[*]"] || !in["[*]"] {
		t.Error("lifecycle diagram: no start or no end")
	}
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
