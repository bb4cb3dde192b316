package gust

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxRootNames bounds the package's exported top-level types, functions and
// variables (constants and methods not counted): the root package holds only
// what a user passes or receives, and a feature with a vocabulary of its own
// gets a package of its own (as the Hub did).
const maxRootNames = 25

func TestRootPackageStaysSmall(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, 0)
			require.NoError(t, err)
			if f.Name.Name == "gust" {
				files = append(files, f)
			}
		}
	}
	var names []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						if d.Tok == token.VAR {
							for _, n := range s.Names {
								if n.IsExported() {
									names = append(names, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	t.Logf("%d exported top-level names: %s", len(names), strings.Join(names, ", "))
	require.LessOrEqual(t, len(names), maxRootNames, "the root package grew past its budget: %v", names)
	require.Contains(t, names, "Upgrader") // the walk saw the package
}
