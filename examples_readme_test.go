package gust_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
