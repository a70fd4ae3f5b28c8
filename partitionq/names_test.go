package partitionq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

// The text rule of Message (keys, types, payloads): valid UTF-8 without
// NUL. A surrogate code point encoded in UTF-8 (ED A0 80 for U+D800) is not
// valid UTF-8; a Go string can hold it, and it is what the command decodes
// an unpaired "\ud800" escape of JSON to, so the error must name it in
// those words rather than as a stray byte.
func TestMessageValidateNamesTheProblem(t *testing.T) {
	t.Parallel()
	cases := []struct {
		m            partitionq.Message
		field, value string
		problem      []string
	}{
		{partitionq.Message{Key: "\xff"}, "key", `"\xff"`, []string{"not valid UTF-8", "byte 0xff at offset 0"}},
		{partitionq.Message{Key: "\xfe"}, "key", `"\xfe"`, []string{"not valid UTF-8", "byte 0xfe at offset 0"}},
		{partitionq.Message{Key: "\xed\xa0\x80"}, "key", `"\u{d800}"`, []string{"U+D800", "at offset 0", "unpaired UTF-16 surrogate", `\ud800 escape`}},
		{partitionq.Message{Key: "k", Type: "a\xed\xb0\x80b"}, "type", `"a\u{dc00}b"`, []string{"U+DC00", "at offset 1"}},
		{partitionq.Message{Key: "k", Payload: []byte("{\"a\":\"\xed\xbf\xbf\"}")}, "payload", `"{\"a\":\"\u{dfff}\"}"`, []string{"U+DFFF", "at offset 6"}},
		{partitionq.Message{Key: "k", Payload: []byte("ok\x00")}, "payload", `"ok\x00"`, []string{"NUL byte", "at offset 2"}},
	}
	for _, c := range cases {
		err := c.m.Validate()
		var ve *partitionq.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%+v: %v, want a *ValidationError", c.m, err)
			continue
		}
		if ve.Field != c.field || ve.Value != c.value {
			t.Errorf("%+v: field %q value %s, want %q %s", c.m, ve.Field, ve.Value, c.field, c.value)
		}
		for _, p := range c.problem {
			if !strings.Contains(ve.Problem, p) {
				t.Errorf("%+v: problem %q does not say %q", c.m, ve.Problem, p)
			}
		}
		if ve.Fix == "" {
			t.Errorf("%+v: no fix in %v", c.m, err)
		}
	}
	// A surrogate pair encoded as the one character it stands for is text.
	if err := (partitionq.Message{Key: "\U0001F600", Type: "\ud7ff\ue000", Payload: []byte("\U0010FFFF")}).Validate(); err != nil {
		t.Errorf("valid text refused: %v", err)
	}
}

// Every error that echoes a value clips it: a 100 KB key, type or payload
// gives a short message that still says how long the value was.
func TestValidationErrorsClipTheValue(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100_000)
	for _, m := range []partitionq.Message{{Key: long}, {Key: "k", Type: long}, {Key: "k", Payload: []byte(long + "\x00")}} {
		err := m.Validate()
		if err == nil {
			t.Fatalf("message of %d bytes accepted", len(long))
		}
		if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "(100000 bytes)") && !strings.Contains(msg, "(100001 bytes)") {
			t.Errorf("error of %d bytes: %.300s", len(msg), msg)
		}
	}
}

// Operator actions store who acts and why in the audit trail and the dead
// letters: the text rule holds there too, checked before anything is
// written, with an error that names the field (before, PostgreSQL's
// "invalid byte sequence for encoding" came back raw from the middle of
// the transaction).
func TestActorAndReasonFollowTheTextRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ actor, reason, field string }{
		{"\xff", "", "actor"},
		{"alice", "a\xed\xa0\x80b", "reason"},
		{"al\x00ice", "", "actor"},
	} {
		calls := map[string]error{}
		for _, action := range []partitionq.AuditAction{partitionq.AuditSkip, partitionq.AuditRetry, partitionq.AuditQuarantine} {
			_, calls["Act "+string(action)] = b.client.Act(b.ctx, partitionq.ActionRequest{Action: action, Queue: "q", Group: "g", Key: "k", Actor: bad.actor, Reason: bad.reason})
		}
		_, calls["Replay"] = b.client.Replay(b.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: 1, Reason: bad.reason, Actor: bad.actor})
		_, calls["PurgeMatching"] = b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true, Actor: bad.actor, Reason: bad.reason})
		calls["DropGroup"] = b.client.DropGroup(b.ctx, partitionq.DropGroupRequest{Queue: "q", Group: "g", Force: true, Actor: bad.actor, Reason: bad.reason})
		for call, err := range calls {
			var ve *partitionq.ValidationError
			if !errors.As(err, &ve) || ve.Field != bad.field {
				t.Errorf("%s with actor %q reason %q: %v, want a *ValidationError for %s", call, bad.actor, bad.reason, err, bad.field)
			}
		}
	}
	if _, err := b.client.Group(b.ctx, "q", "g"); err != nil {
		t.Fatalf("the group is gone after refused drops: %v", err)
	}
	if es, err := b.client.Audit(b.ctx, "q", "g", 100); err != nil || len(es) != 0 {
		t.Fatalf("refused actions audited: %+v, %v", es, err)
	}

	// The key filter of DeadLetters is a key: the same rule, not a raw
	// SQL error.
	_, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: "\xfe"})
	var ve *partitionq.ValidationError
	if !errors.As(err, &ve) || ve.Field != "key" {
		t.Errorf("DeadLetters with key \\xfe: %v, want a *ValidationError for key", err)
	}

	// Config.Actor and WorkerConfig.Identity are checked where they are given.
	if _, err := partitionq.NewClient(b.ctx, b.pool, partitionq.Config{Actor: "\xff"}); !errors.As(err, &ve) || ve.Field != "Config.Actor" {
		t.Errorf("NewClient with Actor \\xff: %v, want a *ValidationError for Config.Actor", err)
	}
	_, err = b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Identity: "w\xff",
		Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil })})
	if !errors.As(err, &ve) || ve.Field != "WorkerConfig.Identity" {
		t.Errorf("NewWorker with Identity w\\xff: %v, want a *ValidationError for WorkerConfig.Identity", err)
	}
}
