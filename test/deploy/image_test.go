package deploy_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// binDir holds the binary built as the Dockerfile builds it; TestMain
// makes and removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "partitionq-deploy-test")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dockerfile is what the checks read of the Dockerfile.
type dockerfile struct {
	text  string
	args  map[string]string // ARG NAME=default (unquoted)
	from  []string
	user  string // the last USER
	build string // the RUN line that runs go build
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return parseDockerfile(string(b))
}

func parseDockerfile(text string) dockerfile {
	d := dockerfile{text: text, args: map[string]string{}}
	for _, line := range scanLines(text) {
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "ARG":
			name, val, _ := strings.Cut(rest, "=")
			d.args[name] = strings.Trim(val, `"`)
		case "FROM":
			d.from = append(d.from, rest)
		case "USER":
			d.user = rest
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.build = rest
			}
		}
	}
	return d
}

// makeVars reads NAME := value assignments of the Makefile.
func makeVars(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+) := (.*)$`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = strings.TrimSpace(m[2])
	}
	return out
}

// dryRun is what `make -n TARGET` would run.
func dryRun(t *testing.T, target string) string {
	t.Helper()
	cmd := exec.Command("make", "-n", target)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	return strings.ReplaceAll(string(out), "\\\n", " ")
}

// buildLikeTheImage runs the Dockerfile's go build line here, with its
// build arguments' defaults, writing the binary into binDir.
var buildLikeTheImage = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return "", err
	}
	d := parseDockerfile(string(b))
	if d.build == "" {
		return "", fmt.Errorf("the Dockerfile has no RUN line with go build")
	}
	bin := filepath.Join(binDir, "partitionq")
	line := strings.ReplaceAll(d.build, "/out/partitionq", bin)
	line = os.Expand(line, func(name string) string { return d.args[name] })
	cmd := exec.Command("sh", "-c", line) // go on PATH, as go test finds it
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", line, err, out)
	}
	return bin, nil
})

// imageBinary is the partitionq binary built as the image builds it.
func imageBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildLikeTheImage()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// The image's binary is built as make build builds it: the Dockerfile's
// build arguments default to the Makefile's BUILD_ENV and BUILD_FLAGS,
// which make build uses and make image passes on, with the Go version of
// go.mod's toolchain line; built so here, it is a static binary. The image
// has a build stage of its own and runs as a user that is not root.
func TestImageBuildsAsMakeBuild(t *testing.T) {
	t.Parallel()
	d := readDockerfile(t)
	vars := makeVars(t)
	for _, name := range []string{"BUILD_ENV", "BUILD_FLAGS"} {
		if vars[name] == "" || d.args[name] != vars[name] {
			t.Errorf("the Dockerfile's ARG %s defaults to %q, the Makefile's %s is %q", name, d.args[name], name, vars[name])
		}
	}
	if !strings.Contains(vars["BUILD_ENV"], "CGO_ENABLED=0") {
		t.Errorf("BUILD_ENV %q does not turn cgo off: the binary would not be static", vars["BUILD_ENV"])
	}
	if want := "env ${BUILD_ENV} go build ${BUILD_FLAGS} -o /out/partitionq ./cmd/partitionq"; d.build != want {
		t.Errorf("the Dockerfile builds with %q, want %q", d.build, want)
	}
	build := dryRun(t, "build")
	if want := vars["BUILD_ENV"] + " go build " + vars["BUILD_FLAGS"] + " -o bin/partitionq ./cmd/partitionq"; !strings.Contains(build, want) {
		t.Errorf("make build runs\n%s\nwithout %q", build, want)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	toolchain := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindSubmatch(gomod)
	if toolchain == nil {
		t.Fatal("go.mod has no toolchain line")
	}
	goImage := "golang:" + string(toolchain[1]) + "-bookworm"
	if d.args["GO_IMAGE"] != goImage {
		t.Errorf("the Dockerfile's GO_IMAGE defaults to %q, want %q (go.mod's toolchain)", d.args["GO_IMAGE"], goImage)
	}
	image := dryRun(t, "image")
	for _, want := range []string{"docker build ", "--build-arg GO_IMAGE=" + goImage, "--build-arg BUILD_ENV='" + vars["BUILD_ENV"] + "'",
		"--build-arg BUILD_FLAGS='" + vars["BUILD_FLAGS"] + "'"} {
		if !strings.Contains(image, want) {
			t.Errorf("make image runs\n%s\nwithout %q", image, want)
		}
	}
	if len(d.from) < 2 || !strings.HasSuffix(d.from[0], " AS build") {
		t.Errorf("the Dockerfile's stages: %q, want a build stage and the image's", d.from)
	}
	if d.user == "" || d.user == "root" || strings.HasPrefix(d.user, "0") {
		t.Errorf("the image runs as USER %q: want an unprivileged user", d.user)
	}

	f, err := elf.Open(imageBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary built as the image builds it asks for a dynamic loader: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary built as the image builds it needs shared libraries %v", libs)
	}
}
