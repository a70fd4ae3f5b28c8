package partitionq

import (
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	if dl, _ := classify(DeadLetterNow(errBoomInternal)); !dl {
		t.Fatal("DeadLetterNow not classified")
	}
	if _, d := classify(RetryAfter(3*time.Second, errBoomInternal)); d != 3*time.Second {
		t.Fatalf("RetryAfter classified as %s", d)
	}
	if dl, d := classify(errBoomInternal); dl || d != 0 {
		t.Fatal("a plain error was classified")
	}
}

type boomErr struct{}

func (boomErr) Error() string { return "boom" }

var errBoomInternal = boomErr{}
