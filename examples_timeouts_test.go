package gust

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExampleServersSetTimeouts: every http.Server the examples build, and
// the one in README's quick start, sets ReadHeaderTimeout. Without it a
// client holds a connection for ever by sending its request head a byte at
// a time (slowloris), which is what users copy from an example.
func TestExampleServersSetTimeouts(t *testing.T) {
	t.Parallel()
	found := 0
	for _, dir := range []string{"examples", filepath.Join("metrics", "prometheus", "example")} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok || !isHTTPServer(lit.Type) {
					return true
				}
				found++
				require.True(t, hasKey(lit, "ReadHeaderTimeout"), "%s: an http.Server without ReadHeaderTimeout", path)
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, found, 5, "the examples' http.Servers were not found")

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	servers := regexp.MustCompile(`(?s)&http\.Server\{.*?\n\t?\}`).FindAllString(string(readme), -1)
	require.NotEmpty(t, servers, "README's quick start builds no http.Server")
	for _, s := range servers {
		require.Contains(t, s, "ReadHeaderTimeout", "README: an http.Server without ReadHeaderTimeout")
	}
}

func isHTTPServer(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "http" && sel.Sel.Name == "Server"
}

func hasKey(lit *ast.CompositeLit, name string) bool {
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == name {
				return true
			}
		}
	}
	return false
}
