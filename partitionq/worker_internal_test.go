package partitionq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	cases := []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second}, {10, 5 * time.Minute}, {1000, 5 * time.Minute}}
	for _, c := range cases {
		if got := backoff(time.Second, 5*time.Minute, c.n); got != c.want {
			t.Errorf("backoff(%d) = %s, want %s", c.n, got, c.want)
		}
	}
}

// Every field wrong: validate names the first in WorkerConfig's
// declaration order (groups included), every time; with that one put
// right, the next. A map's order is random, so the same mistakes must not
// depend on one.
func TestWorkerConfigValidationIsDeterministic(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Event) error { return nil })
	cfg := WorkerConfig{Queue: "q", Group: "g", SlotCount: -1,
		Retry: RetryConfig{Policy: "later", MaxAttempts: -2, BackoffMin: -time.Second, BackoffMax: -2 * time.Second,
			MaxBlocked: BlockedLimit{After: -time.Second}, HeadScanInterval: -time.Second},
		Limits: LimitsConfig{Concurrency: -1, DrainConcurrency: -1, BatchMinEvents: -2, HandlerTimeout: -time.Second,
			ShutdownTimeout: -time.Second, PollInterval: -time.Second},
		Ownership: OwnershipConfig{LeaseDuration: time.Millisecond, StandbyPoll: -time.Second, DeadHostTimeout: time.Second},
		Ticker:    &TickerConfig{Interval: -time.Second, MaintInterval: -time.Second},
		Identity:  "w\xff",
	}
	fixes := []struct {
		field string
		fix   func(*WorkerConfig)
	}{
		{"WorkerConfig.SlotCount", func(c *WorkerConfig) { c.SlotCount = 0 }},
		{"WorkerConfig.Handler", func(c *WorkerConfig) { c.Handler = h }},
		{"WorkerConfig.Retry.Policy", func(c *WorkerConfig) { c.Retry.Policy = "" }},
		{"WorkerConfig.Retry.MaxAttempts", func(c *WorkerConfig) { c.Retry.MaxAttempts = 0 }},
		{"WorkerConfig.Retry.BackoffMin", func(c *WorkerConfig) { c.Retry.BackoffMin = 0 }},
		{"WorkerConfig.Retry.BackoffMax", func(c *WorkerConfig) { c.Retry.BackoffMax = 0 }},
		{"WorkerConfig.Retry.MaxBlocked.After", func(c *WorkerConfig) { c.Retry.MaxBlocked.After = 0 }},
		{"WorkerConfig.Retry.HeadScanInterval", func(c *WorkerConfig) { c.Retry.HeadScanInterval = 0 }},
		{"WorkerConfig.Limits.Concurrency", func(c *WorkerConfig) { c.Limits.Concurrency = 0 }},
		{"WorkerConfig.Limits.DrainConcurrency", func(c *WorkerConfig) { c.Limits.DrainConcurrency = 0 }},
		{"WorkerConfig.Limits.BatchMinEvents", func(c *WorkerConfig) { c.Limits.BatchMinEvents = 0 }},
		{"WorkerConfig.Limits.HandlerTimeout", func(c *WorkerConfig) { c.Limits.HandlerTimeout = 0 }},
		{"WorkerConfig.Limits.ShutdownTimeout", func(c *WorkerConfig) { c.Limits.ShutdownTimeout = 0 }},
		{"WorkerConfig.Limits.PollInterval", func(c *WorkerConfig) { c.Limits.PollInterval = 0 }},
		{"WorkerConfig.Ownership.LeaseDuration", func(c *WorkerConfig) { c.Ownership.LeaseDuration = 0 }},
		{"WorkerConfig.Ownership.StandbyPoll", func(c *WorkerConfig) { c.Ownership.StandbyPoll = 0 }},
		{"WorkerConfig.Ownership.DeadHostTimeout", func(c *WorkerConfig) { c.Ownership.DeadHostTimeout = 0 }},
		{"WorkerConfig.Ticker.Interval", func(c *WorkerConfig) { c.Ticker.Interval = 0 }},
		{"WorkerConfig.Ticker.MaintInterval", func(c *WorkerConfig) { c.Ticker.MaintInterval = 0 }},
		{"WorkerConfig.Identity", func(c *WorkerConfig) { c.Identity = "" }},
	}
	for _, f := range fixes {
		for range 20 {
			var ve *ValidationError
			if err := cfg.withDefaults().validate(); !errors.As(err, &ve) || ve.Field != f.field {
				t.Fatalf("validate: %v, want %s named first", err, f.field)
			}
		}
		f.fix(&cfg)
	}
	if err := cfg.withDefaults().validate(); err != nil {
		t.Fatalf("validate, every field put right: %v", err)
	}
}

// A Policy of "skip", the retry-later policy's old name, is refused
// naming the new one; an unknown one names both policies.
func TestPolicyNamedSkipIsRefused(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Event) error { return nil })
	var ve *ValidationError
	err := WorkerConfig{Queue: "q", Group: "g", Handler: h, Retry: RetryConfig{Policy: "skip"}}.withDefaults().validate()
	if !errors.As(err, &ve) || ve.Field != "WorkerConfig.Retry.Policy" || !strings.Contains(err.Error(), "PolicyRetryLater") {
		t.Fatalf("validate: %v, want WorkerConfig.Retry.Policy refused, naming PolicyRetryLater", err)
	}
	err = WorkerConfig{Queue: "q", Group: "g", Handler: h, Retry: RetryConfig{Policy: "later"}}.withDefaults().validate()
	if !errors.As(err, &ve) || ve.Field != "WorkerConfig.Retry.Policy" || !strings.Contains(err.Error(), `"pause" or "retry-later"`) {
		t.Fatalf("validate: %v, want WorkerConfig.Retry.Policy refused, naming pause and retry-later", err)
	}
}

// A SlotCount outside 0 to MaxSlots is refused naming the field, before
// the group is read; 0 (the group's) is fine.
func TestWorkerConfigSlotCountOutOfRange(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Event) error { return nil })
	for _, n := range []int{-1, MaxSlots + 1} {
		var ve *ValidationError
		err := WorkerConfig{Queue: "q", Group: "g", Handler: h, SlotCount: n}.withDefaults().validate()
		if !errors.As(err, &ve) || ve.Field != "WorkerConfig.SlotCount" || ve.Fix == "" {
			t.Errorf("SlotCount %d: %v, want WorkerConfig.SlotCount refused with a fix", n, err)
		}
	}
	if err := (WorkerConfig{Queue: "q", Group: "g", Handler: h}).withDefaults().validate(); err != nil {
		t.Errorf("SlotCount 0: %v", err)
	}
}

// A worker's Ticker takes TickerConfig's defaults in a copy (the caller's
// stays as it was), and a negative interval is refused naming the field.
func TestWorkerConfigTicker(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Event) error { return nil })
	mine := &TickerConfig{MaintInterval: time.Minute}
	cfg := WorkerConfig{Queue: "q", Group: "g", Handler: h, Ticker: mine}.withDefaults()
	if cfg.Ticker.Interval != TickIntervalDefault || cfg.Ticker.MaintInterval != time.Minute || mine.Interval != 0 {
		t.Errorf("Ticker %+v (the caller's now %+v): want the default interval, the given maintenance, the caller's untouched", *cfg.Ticker, *mine)
	}
	if cfg := (WorkerConfig{Queue: "q", Group: "g", Handler: h}).withDefaults(); cfg.Ticker != nil {
		t.Errorf("no Ticker given, but the defaults made one: %+v", *cfg.Ticker)
	}
	for field, tc := range map[string]TickerConfig{"WorkerConfig.Ticker.Interval": {Interval: -time.Second},
		"WorkerConfig.Ticker.MaintInterval": {MaintInterval: -time.Second}} {
		var ve *ValidationError
		err := WorkerConfig{Queue: "q", Group: "g", Handler: h, Ticker: &tc}.withDefaults().validate()
		if !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("Ticker %+v: %v, want %s refused", tc, err, field)
		}
	}
}
