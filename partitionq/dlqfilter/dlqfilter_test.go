package dlqfilter

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

func TestApply(t *testing.T) {
	now := time.Date(2024, 5, 2, 12, 0, 0, 0, time.UTC)
	var q partitionq.DeadLetterQuery
	err := Apply(&q, `key=tenant-42 type=FileDeleted error="disk \"full\"" reason=skip since=24h before=2024-05-02T11:00:00Z pending id=17,18 id=3`, now)
	if err != nil {
		t.Fatal(err)
	}
	want := partitionq.DeadLetterQuery{Key: "tenant-42", Type: "FileDeleted", Error: `disk "full"`, Reason: "skip",
		DeadAfter: now.Add(-24 * time.Hour), DeadBefore: now.Add(-time.Hour), Pending: true, IDs: []int64{17, 18, 3}}
	if !reflect.DeepEqual(q, want) {
		t.Fatalf("got  %+v\nwant %+v", q, want)
	}
	// Format reads back as the same filter.
	var again partitionq.DeadLetterQuery
	if err := Apply(&again, Format(q), now); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("Format %q read back as %+v, %v", Format(q), again, err)
	}
}

func TestApplyErrors(t *testing.T) {
	for expr, want := range map[string]string{
		"colour=red":      `unknown filter field "colour"`,
		"key":             "has no value",
		`error="open`:     "unclosed quote",
		"since=yesterday": "give a time",
		"id=x":            "is not a dead letter id",
		"pending=maybe":   "give pending",
	} {
		var q partitionq.DeadLetterQuery
		if err := Apply(&q, expr, time.Now()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Apply(%q) = %v, want an error with %q", expr, err, want)
		}
	}
}
