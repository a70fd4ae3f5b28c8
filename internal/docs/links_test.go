package docs

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The pages a reader follows links through: the README, the changelog,
// docs/ and the markdown of the deploy kit and the examples.
func pages(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"README.md", "CHANGELOG.md"} {
		out = append(out, filepath.Join(root, f))
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, docs...)
	for _, dir := range []string{"deploy", "examples"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".md") {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(out)
	return out
}

// TestDocsLinksResolve checks every markdown link of the pages above that
// points into the repository: its file exists, and its #anchor (to the
// same page or another markdown file) is the slug of one of that page's
// headings, as GitHub makes them. Links to the web are not followed.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	for _, p := range pages(t, root) {
		for _, e := range checkLinks(root, p) {
			t.Error(e)
		}
	}
}

// The check itself finds what it should: a missing file, a missing
// anchor, on this page and another, and passes the good links.
func TestLinkCheckFindsBrokenLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B\n\n## Send once\n\n## Send once\n\n```\n## not a heading\n```\n")
	write("README.md", strings.Join([]string{
		"# A: the `top`",
		"[ok](docs/b.md#send-once) [ok](docs/b.md#send-once-1) [ok](#a-the-top) [ok](docs/)",
		"[web](https://example.com/x#y) `[code](nowhere.md)`",
		"[gone](docs/c.md)",
		"[no anchor](docs/b.md#send-twice)",
		"[here](#nothing)",
		"[code block](docs/b.md#not-a-heading)",
	}, "\n"))
	errs := checkLinks(root, filepath.Join(root, "README.md"))
	want := []string{"README.md:4: ", "README.md:5: ", "README.md:6: ", "README.md:7: "}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(errs), len(want), strings.Join(errs, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i], w) {
			t.Errorf("error %d = %q, want it to start with %q", i, errs[i], w)
		}
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Scaling out and rolling restarts (2026-12-07, the 2-core machine)": "scaling-out-and-rolling-restarts-2026-12-07-the-2-core-machine",
		"Latency (send to handler, 1000 events/s for 10s)":                  "latency-send-to-handler-1000-eventss-for-10s",
		"`partitionq demo`":           "partitionq-demo",
		"Engines: PgQ and PgQue":      "engines-pgq-and-pgque",
		"The [guarantees](x.md) kept": "the-guarantees-kept",
		"snake_case stays":            "snake_case-stays",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	heading    = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// slug is GitHub's anchor of a heading: its text as shown, lowercased,
// without characters other than letters, digits, spaces, hyphens and
// underscores, spaces as hyphens.
func slug(text string) string {
	text = mdLinkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// lines gives a page's lines outside fenced code blocks, with their numbers.
func lines(path string) (map[int]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inFence := false
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if !inFence {
			out[n] = l
		}
	}
	return out, sc.Err()
}

// anchors gives the anchors of a markdown page: its headings' slugs, the
// second of two equal ones with -1, the third -2, and any <a name>/<a id>.
func anchors(path string) (map[string]bool, error) {
	ls, err := lines(path)
	if err != nil {
		return nil, err
	}
	nums := make([]int, 0, len(ls))
	for n := range ls {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, n := range nums {
		for _, m := range htmlAnchor.FindAllStringSubmatch(ls[n], -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(ls[n])
		if m == nil {
			continue
		}
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out, nil
}

// checkLinks returns one line per broken link of the page at path, as
// "file:line: what is wrong: what to do", the file relative to root.
func checkLinks(root, path string) []string {
	rel := func(p string) string {
		if r, err := filepath.Rel(root, p); err == nil {
			return filepath.ToSlash(r)
		}
		return p
	}
	ls, err := lines(path)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", rel(path), err)}
	}
	nums := make([]int, 0, len(ls))
	for n := range ls {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	cache := map[string]map[string]bool{}
	var errs []string
	for _, n := range nums {
		l := codeSpan.ReplaceAllString(ls[n], "code")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(l); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if scheme.MatchString(target) {
				continue // the web, mail: not checked here
			}
			where := fmt.Sprintf("%s:%d: link (%s)", rel(path), n, target)
			file, anchor, _ := strings.Cut(target, "#")
			file, err := url.PathUnescape(file)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v: write the path without %% escapes", where, err))
				continue
			}
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					errs = append(errs, fmt.Sprintf("%s: no file %s: point it at a file that exists, relative to %s", where, rel(dest), rel(filepath.Dir(path))))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			as, ok := cache[dest]
			if !ok {
				if as, err = anchors(dest); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", where, err))
					continue
				}
				cache[dest] = as
			}
			if !as[anchor] {
				errs = append(errs, fmt.Sprintf("%s: %s has no heading whose anchor is #%s: use one of its headings' anchors%s", where, rel(dest), anchor, nearest(as, anchor)))
			}
		}
	}
	return errs
}

// nearest names the anchor of the page most like the one asked for, as a
// hint: the one sharing the most words with it, if it shares at least half.
func nearest(as map[string]bool, anchor string) string {
	want := strings.Split(anchor, "-")
	best, bestN := "", 0
	for a := range as {
		n := 0
		words := map[string]bool{}
		for _, w := range strings.Split(a, "-") {
			words[w] = true
		}
		for _, w := range want {
			if words[w] {
				n++
			}
		}
		if n > bestN || (n == bestN && n > 0 && a < best) {
			best, bestN = a, n
		}
	}
	if bestN == 0 || 2*bestN < len(want) {
		return ""
	}
	return fmt.Sprintf(" (perhaps #%s)", best)
}
