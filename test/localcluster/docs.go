package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// DocsExample is the shell block between <!-- name --> and <!-- /name --> in the one page of
// root's docs/ (or README.md) that has it: the suites run the manual's examples as written.
func DocsExample(tb testing.TB, root, name string) string {
	tb.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(tb, err)
	pages = append(pages, filepath.Join(root, "README.md"))
	var blocks []string
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		require.NoError(tb, err)
		text := string(raw)
		start := strings.Index(text, "<!-- "+name+" -->")
		end := strings.Index(text, "<!-- /"+name+" -->")
		if start >= 0 && end > start {
			blocks = append(blocks, text[start:end])
		}
	}
	require.Len(tb, blocks, 1, "one page of docs/ or the README has the %s example", name)
	block := blocks[0]
	block = block[strings.Index(block, "```sh\n")+len("```sh\n"):]
	return block[:strings.LastIndex(block, "```")]
}

// RunDocsExample runs the docs example name with bash in dir, as a user with the cluster's
// KUBECONFIG and kubectl on the PATH would; firstLine replaces the example's first line (where
// an example sets what the reader chooses, such as NS=...; "" keeps it). It must succeed.
func (c *Cluster) RunDocsExample(tb testing.TB, name, dir, firstLine string) string {
	tb.Helper()
	script := DocsExample(tb, c.Root, name)
	if firstLine != "" {
		script = firstLine + "\n" + script[strings.Index(script, "\n")+1:]
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.AdminKubeconfig,
		"PATH="+filepath.Dir(c.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "%s", out)
	return string(out)
}
