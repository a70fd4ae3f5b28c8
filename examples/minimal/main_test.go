package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/test/pgtest"
)

// The example runs to its end against a fresh database, twice (Setup is
// idempotent and the second run handles only its own events).
func TestRun(t *testing.T) {
	db := pgtest.New(t)
	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		err := run(ctx, db.URL)
		if ctx.Err() != nil {
			t.Fatal("the example did not finish within 60s")
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The README shows this program, exactly.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Error("README.md does not show examples/minimal/main.go as it is: copy the file into its ```go block")
	}
}
