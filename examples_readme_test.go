package gust_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeExamplesShutdown: the examples README names as hanging the
// Upgrader's Shutdown on http.Server.RegisterOnShutdown do. (That their
// shutdown sends 1001 is tested in each example's package.)
func TestReadmeExamplesShutdown(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(readme)), " ")
	m := regexp.MustCompile(`RegisterOnShutdown.*?\. ((?:examples/\w+(?:, | and )?)+) do this`).FindStringSubmatch(text)
	require.NotNil(t, m, "README no longer names the examples that use RegisterOnShutdown")
	names := regexp.MustCompile(`examples/\w+`).FindAllString(m[1], -1)
	require.GreaterOrEqual(t, len(names), 2)
	for _, dir := range names {
		src, err := os.ReadFile(filepath.Join(dir, "main.go"))
		require.NoError(t, err)
		require.Contains(t, string(src), ".RegisterOnShutdown(", "%s: README says it hangs Shutdown on RegisterOnShutdown", dir)
		require.Contains(t, string(src), ".Shutdown(ctx)", "%s: the hook should call the Upgrader's Shutdown", dir)
	}
}

// TestReadmeQuickStartAgrees: the quick start's echo server and client
// meet at the URL the README gives.
func TestReadmeQuickStartAgrees(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`go run \./examples/echo +# an echo server on (ws://\S+)`).FindSubmatch(readme)
	require.NotNil(t, m, "README's quick start no longer runs examples/echo")
	url := string(m[1])
	require.Contains(t, string(readme), "go run ./examples/client ")
	echo, err := os.ReadFile(filepath.Join("examples", "echo", "main.go"))
	require.NoError(t, err)
	path := url[strings.Index(url[len("ws://"):], "/")+len("ws://"):]
	require.Contains(t, string(echo), `HandleFunc("`+path+`"`, "examples/echo does not serve %s", url)
	client, err := os.ReadFile(filepath.Join("examples", "client", "main.go"))
	require.NoError(t, err)
	require.Contains(t, string(client), `"url", "`+url+`"`, "examples/client's default URL is not %s", url)
}

// TestReadmeGuidesFirstScreen: a reader finds every page of docs/ (netpoll
// mode, compression, the hub, metrics, ...) from README's first screen.
func TestReadmeGuidesFirstScreen(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lines := strings.Split(string(readme), "\n")
	screen := strings.Join(lines[:min(len(lines), 50)], "\n")
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, p := range pages {
		require.Contains(t, screen, "]("+filepath.ToSlash(p)+")", "README's first 50 lines do not link %s", p)
	}
}

// TestDocsPathsExist: every file or directory README.md and docs/*.md link
// to or name exists, so that the guide cannot send a reader to a file
// deleted since.
func TestDocsPathsExist(t *testing.T) {
	t.Parallel()
	roots := trackedRoots(t)
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{"README.md"}, files...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		links, names := docPaths(string(b), roots)
		require.NotEmpty(t, links, "%s links to nothing", f)
		for _, l := range links {
			target, frag, _ := strings.Cut(l, "#")
			file := f
			if target != "" {
				file = filepath.Join(filepath.Dir(f), filepath.FromSlash(target))
				_, err := os.Stat(file)
				assert.NoError(t, err, "%s links to %s, which does not exist", f, l)
			}
			if frag != "" && strings.HasSuffix(file, ".md") {
				md, err := os.ReadFile(file)
				if assert.NoError(t, err, "%s links to %s", f, l) {
					assert.Contains(t, headingAnchors(string(md)), frag, "%s links to %s: no such heading", f, l)
				}
			}
		}
		for _, n := range names {
			_, err := os.Stat(filepath.FromSlash(n))
			assert.NoError(t, err, "%s names %s, which does not exist", f, n)
		}
	}
}

// TestDocPaths: what docPaths takes for a link or a path, and what it
// leaves alone.
func TestDocPaths(t *testing.T) {
	t.Parallel()
	roots := map[string]bool{"examples": true, "scripts": true, "hub": true}
	text := "See [the results](../benchmark/results/x.md#a) and [gone](gone.md), [site](https://example.com).\n" +
		"Reading runs through `transport_unix.go` and `examples/chat`'s main, as examples/echo does;\n" +
		"`scripts/bench -scenarios \"a b\"`, `go run ./examples/autobahn`, `hub/`, `hub.Publish`, `-tls`,\n" +
		"`ws://127.0.0.1:8080/ws`, `/debug/vars`, `results/<date>.md`, `crypto/tls`, `net.Conn`, cluster/nats's.\n" +
		"```go\nimport \"examples/not-checked\"\n```\n" +
		"```sh\nscripts/autobahn -server both   # and ./missing.sh\n```\n"
	links, names := docPaths(text, roots)
	require.Equal(t, []string{"../benchmark/results/x.md#a", "gone.md"}, links)
	require.ElementsMatch(t, []string{"transport_unix.go", "examples/chat", "examples/echo", "scripts/bench",
		"examples/autobahn", "hub/", "scripts/autobahn", "missing.sh"}, names)
}

// trackedRoots: the repository's top-level entries, but those .gitignore
// names (a checkout made by hand has them, a clone does not), and docs.
func trackedRoots(t *testing.T) map[string]bool {
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	ignore, err := os.ReadFile(".gitignore")
	require.NoError(t, err)
	var patterns []string
	for _, l := range strings.Split(string(ignore), "\n") {
		if p := strings.Trim(strings.TrimSpace(l), "/"); strings.HasPrefix(l, "/") && !strings.Contains(p, "/") {
			patterns = append(patterns, p)
		}
	}
	roots := map[string]bool{"docs": true}
entries:
	for _, e := range entries {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, e.Name()); ok {
				continue entries
			}
		}
		roots[e.Name()] = true
	}
	return roots
}

var (
	mdLink      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdWholeLink = regexp.MustCompile(`\[[^\]]*\]\([^)\s]+\)`)
	mdCode      = regexp.MustCompile("`([^`]+)`")
	mdFence     = regexp.MustCompile("(?ms)^```([\\w-]*)\n(.*?)^```")
	mdHeading   = regexp.MustCompile(`(?m)^#{1,6} +(.+)$`)
	fileName    = regexp.MustCompile(`^[\w.-]+$`)
	pathExts    = map[string]bool{".go": true, ".md": true, ".json": true, ".jsonl": true, ".svg": true, ".py": true, ".sh": true, ".html": true, ".mod": true, ".sum": true, ".txt": true, ".yml": true, ".yaml": true}
	unchecked   = map[string]bool{"go": true, "nginx": true, "haproxy": true, "caddyfile": true} // code, not paths
	notPathSet  = "$<>*{}?=|@%^~\\"
)

// docPaths returns the relative links of a Markdown text (not web
// addresses, not bare #fragments), each as written, and the repository
// paths it names outside them (a link's text is not one): in code spans, in fenced blocks other than
// Go code and proxy configurations, and in prose. A name is taken for a
// path when its first element is one of roots (a top-level directory or
// file), or when it has no slash and ends in an extension of the
// repository's files (transport_unix.go); flags, URLs, Go identifiers
// (hub.Publish, net.Conn) and paths outside the repository (crypto/tls,
// /debug/vars) are left alone, as is anything with a placeholder.
func docPaths(text string, roots map[string]bool) (links, names []string) {
	var prose strings.Builder
	last := 0
	for _, m := range mdFence.FindAllStringSubmatchIndex(text, -1) {
		prose.WriteString(text[last:m[0]])
		last = m[1]
		if lang := strings.ToLower(text[m[2]:m[3]]); !unchecked[lang] {
			names = append(names, pathWords(text[m[4]:m[5]], roots)...)
		}
	}
	prose.WriteString(text[last:])
	rest := prose.String()
	for _, m := range mdLink.FindAllStringSubmatch(rest, -1) {
		l := m[1]
		if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") || strings.HasPrefix(l, "#") {
			continue
		}
		links = append(links, l)
	}
	rest = mdWholeLink.ReplaceAllString(rest, " ") // a link's text is not checked, its target is
	for _, m := range mdCode.FindAllStringSubmatch(rest, -1) {
		names = append(names, pathWords(m[1], roots)...)
	}
	names = append(names, pathWords(mdCode.ReplaceAllString(rest, " "), roots)...)
	return links, names
}

// pathWords returns the words of s that name repository paths (see docPaths).
func pathWords(s string, roots map[string]bool) []string {
	var out []string
	for _, w := range strings.Fields(s) {
		w = strings.TrimLeft(w, `("'[*_`)
		w = strings.TrimRight(w, `)"',;:.!]*_`)
		w = strings.TrimSuffix(strings.TrimSuffix(w, "'s"), "’s")
		w = strings.TrimPrefix(w, "./")
		if w == "" || strings.HasPrefix(w, "-") || strings.HasPrefix(w, "/") || strings.HasPrefix(w, "../") ||
			strings.Contains(w, "://") || strings.ContainsAny(w, notPathSet) {
			continue
		}
		first, _, nested := strings.Cut(w, "/")
		if nested && roots[first] || !nested && pathExts[filepath.Ext(w)] && fileName.MatchString(w) {
			out = append(out, w)
		}
	}
	return out
}

// headingAnchors returns the #fragments of a Markdown text's headings, as
// GitHub makes them: lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(text string) []string {
	text = mdFence.ReplaceAllString(text, "")
	var out []string
	for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
